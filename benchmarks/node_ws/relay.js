// The Node `ws` anchor of dispatch_bench.py: a relay as a TypeScript AHP host
// would run one. Each client says "sub" or "pub" first (answered "ok"); every
// text a "pub" client sends is parsed, its action put in an envelope with the
// next serverSeq and the sender's origin, serialized once and sent to every
// "sub" client with one ws.send each. Not part of ahpd.
//
// Prints {"port": N} once listening on 127.0.0.1; exits when stdin closes.
'use strict';
const { WebSocketServer } = require('ws');

const subs = new Set();
let seq = 0;
const wss = new WebSocketServer({ host: '127.0.0.1', port: 0, perMessageDeflate: false });

wss.on('connection', (ws) => {
  ws.on('error', () => {});
  let role = null;
  ws.on('close', () => subs.delete(ws));
  ws.on('message', (data, isBinary) => {
    const text = data.toString();
    if (role === null) {
      role = text;
      if (role === 'sub') subs.add(ws);
      ws.send('ok');
      return;
    }
    if (role !== 'pub' || isBinary) return;
    const message = JSON.parse(text);
    const params = message.params;
    seq += 1;
    const frame = JSON.stringify({
      jsonrpc: '2.0',
      method: 'action',
      params: {
        channel: params.channel,
        action: params.action,
        serverSeq: seq,
        origin: { clientId: 'pub', clientSeq: params.clientSeq },
      },
    });
    for (const sub of subs) sub.send(frame);
  });
});

wss.on('listening', () => {
  process.stdout.write(JSON.stringify({ port: wss.address().port }) + '\n');
  process.stdin.on('data', () => {});
  process.stdin.on('end', () => process.exit(0));
});
