// The WebSocket echo peer for loadtest/websocket/compare_ws.py: Go's
// golang.org/x/net/websocket (Debian golang-golang-x-net-dev), each message
// echoed as received (text as text, binary as binary).
//
//	go_wsecho ADDR   (127.0.0.1:18301)
package main

import (
	"log"
	"net/http"
	"os"

	"golang.org/x/net/websocket"
)

func echo(ws *websocket.Conn) {
	for {
		var msg []byte
		if err := websocket.Message.Receive(ws, &msg); err != nil {
			return
		}
		// Receive leaves the frame's type in PayloadType; Send with a
		// string sends text, with []byte binary.
		var err error
		if ws.PayloadType == websocket.TextFrame {
			err = websocket.Message.Send(ws, string(msg))
		} else {
			err = websocket.Message.Send(ws, msg)
		}
		if err != nil {
			return
		}
	}
}

func main() {
	// websocket.Server without Handshake: no Origin check (the load
	// generator sends none; websocket.Handler would refuse it).
	http.Handle("/ws/echo", websocket.Server{Handler: echo})
	log.Fatal(http.ListenAndServe(os.Args[1], nil))
}
