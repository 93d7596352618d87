// The WebSocket echo peer for compare_ws.py: Node's ws (Debian node-ws),
// each message echoed as received, permessage-deflate off (its default).
//
//     node echo.js PORT
'use strict';
const {WebSocketServer} = require('/usr/share/nodejs/ws');

const wss = new WebSocketServer({host: '127.0.0.1', port: Number(process.argv[2])});
wss.on('connection', (ws) => {
    ws.on('message', (data, isBinary) => ws.send(data, {binary: isBinary}));
});
