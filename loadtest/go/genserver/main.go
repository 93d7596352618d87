// The Go peer of smarm's gen_server call benchmark: a server goroutine that
// owns a counter and answers requests carrying their own reply channel.
// Usage: GOMAXPROCS=2 go_genserver [calls]
package main

import (
	"fmt"
	"os"
	"strconv"
	"time"
)

type request struct {
	add   int
	reply chan int
}

func main() {
	n := 1000000
	if len(os.Args) > 1 {
		n, _ = strconv.Atoi(os.Args[1])
	}
	inbox := make(chan request)
	go func() {
		total := 0
		for r := range inbox {
			total += r.add
			r.reply <- total
		}
	}()
	call := func() int {
		reply := make(chan int, 1)
		inbox <- request{1, reply}
		return <-reply
	}
	for i := 0; i < 10000; i++ { // warm-up
		call()
	}
	t0 := time.Now()
	for i := 0; i < n; i++ {
		call()
	}
	el := time.Since(t0)
	close(inbox)
	fmt.Printf("go_genserver calls=%d ns_per_call=%.1f\n", n, float64(el.Nanoseconds())/float64(n))
}
