// The Go peer of smarm-hello: net/http answering GET /plaintext.
// Usage: GOMAXPROCS=2 go_http 127.0.0.1:PORT
package main

import (
	"log"
	"net/http"
	"os"
)

func main() {
	hello := []byte("Hello, World!")
	mux := http.NewServeMux()
	mux.HandleFunc("/plaintext", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("Server", "go")
		w.Write(hello)
	})
	log.Fatal(http.ListenAndServe(os.Args[1], mux))
}
