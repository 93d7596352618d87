// The Go peer of smarm-server's notes service for the database benchmark
// (loadtest/postgres/compare_notes.py): net/http with a pgx v4 pool
// (Debian golang-github-jackc-pgx-v4-dev) answering
//   GET /notes/{id}   200 with the note's body, 404 when absent
// from the same table and database, pool of the same size.
// Usage: GOMAXPROCS=2 go_notes 127.0.0.1:PORT "host=/dir user=smarm dbname=postgres" POOL
package main

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"os"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v4"
	"github.com/jackc/pgx/v4/pgxpool"
)

func main() {
	if len(os.Args) != 4 {
		log.Fatal("usage: go_notes ADDR DSN POOL")
	}
	size, err := strconv.Atoi(os.Args[3])
	if err != nil || size < 1 {
		log.Fatalf("go_notes: pool size %q", os.Args[3])
	}
	cfg, err := pgxpool.ParseConfig(fmt.Sprintf("%s pool_max_conns=%d", os.Args[2], size))
	if err != nil {
		log.Fatal(err)
	}
	pool, err := pgxpool.ConnectConfig(context.Background(), cfg)
	if err != nil {
		log.Fatal(err)
	}
	http.HandleFunc("/notes/", func(w http.ResponseWriter, r *http.Request) {
		id, err := strconv.ParseInt(strings.TrimPrefix(r.URL.Path, "/notes/"), 10, 64)
		if err != nil {
			http.Error(w, "id must be an integer", http.StatusBadRequest)
			return
		}
		var body string
		err = pool.QueryRow(r.Context(), "select body from notes where id = $1", id).Scan(&body)
		if err == pgx.ErrNoRows {
			http.Error(w, "no such note", http.StatusNotFound)
			return
		}
		if err != nil {
			http.Error(w, "database error", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Write([]byte(body))
	})
	log.Fatal(http.ListenAndServe(os.Args[1], nil))
}
