// Loopback TCP echo benchmark, the Go peer of smarm-echo: one process runs an
// echo server (a goroutine per connection) and N client goroutines, each
// doing request/response round trips of a fixed-size message.
// Usage: GOMAXPROCS=2 go_echo -conns 64 -seconds 5 -size 64
package main

import (
	"flag"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

func main() {
	conns := flag.Int("conns", 64, "client connections")
	seconds := flag.Float64("seconds", 5, "measured duration")
	size := flag.Int("size", 64, "message bytes")
	flag.Parse()

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func(c net.Conn) {
				defer c.Close()
				buf := make([]byte, 4096)
				for {
					n, err := c.Read(buf)
					if err != nil {
						return
					}
					if _, err := c.Write(buf[:n]); err != nil {
						return
					}
				}
			}(c)
		}
	}()

	var total int64
	var stop int32
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := 0; i < *conns; i++ {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			panic(err)
		}
		wg.Add(1)
		go func(c net.Conn) {
			defer wg.Done()
			defer c.Close()
			msg := make([]byte, *size)
			back := make([]byte, *size)
			<-start
			var n int64
			for atomic.LoadInt32(&stop) == 0 {
				if _, err := c.Write(msg); err != nil {
					panic(err)
				}
				if _, err := io.ReadFull(c, back); err != nil {
					panic(err)
				}
				n++
			}
			atomic.AddInt64(&total, n)
		}(c)
	}
	t0 := time.Now()
	close(start)
	time.Sleep(time.Duration(*seconds * float64(time.Second)))
	atomic.StoreInt32(&stop, 1)
	wg.Wait()
	el := time.Since(t0).Seconds()
	fmt.Printf("go_echo conns=%d size=%d rt_per_s=%.0f\n", *conns, *size, float64(total)/el)
}
