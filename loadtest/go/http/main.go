// The Go peer of smarm-hello and smarm-server: net/http answering
//   GET /plaintext                      "Hello, World!" (as ../shared/peers/go_http)
//   GET|PUT|DELETE /kv/{key}            an in-memory map behind a RWMutex, with
//                                       smarm-server's statuses (200/404, 201/204, 204/404)
//   POST /work/sha256                   the hex SHA-256 of the body
// so every scenario of loadtest/compare has a Go counterpart.
// Usage: GOMAXPROCS=2 go_http 127.0.0.1:PORT
package main

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"log"
	"net/http"
	"os"
	"strings"
	"sync"
)

const valueLimit = 1 << 20

type store struct {
	mu   sync.RWMutex
	data map[string][]byte
}

func (s *store) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := strings.TrimPrefix(r.URL.Path, "/kv/")
	if key == "" || strings.Contains(key, "/") {
		http.NotFound(w, r)
		return
	}
	switch r.Method {
	case http.MethodGet:
		s.mu.RLock()
		v, ok := s.data[key]
		s.mu.RUnlock()
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write(v)
	case http.MethodPut:
		v, err := io.ReadAll(io.LimitReader(r.Body, valueLimit+1))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if len(v) > valueLimit {
			http.Error(w, "value too large", http.StatusRequestEntityTooLarge)
			return
		}
		s.mu.Lock()
		_, existed := s.data[key]
		s.data[key] = v
		s.mu.Unlock()
		if existed {
			w.WriteHeader(http.StatusNoContent)
		} else {
			w.WriteHeader(http.StatusCreated)
		}
	case http.MethodDelete:
		s.mu.Lock()
		_, existed := s.data[key]
		delete(s.data, key)
		s.mu.Unlock()
		if existed {
			w.WriteHeader(http.StatusNoContent)
		} else {
			http.NotFound(w, r)
		}
	default:
		w.Header().Set("Allow", "DELETE, GET, PUT")
		w.WriteHeader(http.StatusMethodNotAllowed)
	}
}

func main() {
	hello := []byte("Hello, World!")
	mux := http.NewServeMux()
	mux.HandleFunc("/plaintext", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("Server", "go")
		w.Write(hello)
	})
	mux.Handle("/kv/", &store{data: make(map[string][]byte)})
	mux.HandleFunc("/work/sha256", func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", "POST")
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		h := sha256.New()
		if _, err := io.Copy(h, r.Body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, hex.EncodeToString(h.Sum(nil))+"\n")
	})
	log.Fatal(http.ListenAndServe(os.Args[1], mux))
}
