// The Node `ws` anchor of host_bench.py: a fan-out server as a TypeScript AHP
// host would run it (one ws.send per client per action), fed the same frame
// texts ahpd sends. Not part of ahpd.
//
// Prints {"port": N} once listening on 127.0.0.1, then reads one JSON command
// per line on stdin and answers one JSON line on stdout:
//   {"cmd":"frame","seq":S}                 -> {"text": the frame for serverSeq S}
//   {"cmd":"fanout","clients":K,"n":N,"batch":B}
//        waits for K clients, sends N frames to each, B between two yields to
//        the event loop -> {"t0": start (CLOCK_MONOTONIC ns, as a string)}
//   {"cmd":"latency","clients":K,"rate":R,"n":N,"deadline":S}
//        N frames paced at R per second, or as many as S seconds allow
//        -> {"base": ns string, "sent": count, "emitted": [ns after base, by seq]}
//   {"cmd":"close"} closes every client.
'use strict';
const readline = require('readline');
const { WebSocketServer } = require('ws');

const ROOT = 'ahp-root://';
const frame = (seq) => JSON.stringify({
  jsonrpc: '2.0', method: 'action',
  params: { channel: ROOT, action: { type: 'root/activeSessionsChanged', activeSessions: seq }, serverSeq: seq },
});

const wss = new WebSocketServer({ host: '127.0.0.1', port: 0, perMessageDeflate: false });
wss.on('connection', (ws) => ws.on('error', () => {}));
const say = (value) => process.stdout.write(JSON.stringify(value) + '\n');
const now = () => process.hrtime.bigint();

function whenClients(k, then) {
  if (wss.clients.size >= k) then();
  else setTimeout(() => whenClients(k, then), 5);
}

function sendAll(text) {
  for (const ws of wss.clients) ws.send(text);
}

function fanout({ clients, n, batch }) {
  whenClients(clients, () => {
    const t0 = now();
    let i = 0;
    const step = () => {
      const end = Math.min(n, i + batch);
      while (i < end) sendAll(frame(++i));
      if (i < n) setImmediate(step);
    };
    step();
    say({ t0: t0.toString() });
  });
}

function latency({ clients, rate, n, deadline }) {
  whenClients(clients, () => {
    const interval = 1e9 / rate;
    const base = now() + 1000000n;
    const emitted = new Array(n + 1).fill(0);
    let i = 0;
    const step = () => {
      if (Number(now() - base) > deadline * 1e9) n = i;  // out of time: report what was sent
      while (i < n && Number(now() - base) >= i * interval) {
        i += 1;
        emitted[i] = Number(now() - base);
        sendAll(frame(i));
      }
      if (i < n) {
        const wait = Math.max(0, i * interval - Number(now() - base)) / 1e6;
        if (wait >= 1) setTimeout(step, Math.floor(wait));
        else setImmediate(step);
      } else {
        say({ base: base.toString(), sent: i, emitted: emitted.slice(0, i + 1) });
      }
    };
    step();
  });
}

wss.on('listening', () => {
  say({ port: wss.address().port });
  const lines = readline.createInterface({ input: process.stdin });
  lines.on('line', (line) => {
    const command = JSON.parse(line);
    if (command.cmd === 'frame') say({ text: frame(command.seq) });
    else if (command.cmd === 'fanout') fanout(command);
    else if (command.cmd === 'latency') latency(command);
    else if (command.cmd === 'close') {
      for (const ws of wss.clients) ws.terminate();
      say({ closed: true });
    }
  });
  lines.on('close', () => process.exit(0));
});
