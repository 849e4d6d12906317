/**
 * A stand-in for a Kubernetes Service in front of signal-server replicas on loopback: an L4 (TCP)
 * forwarder that hands each new client connection to the next replica in round-robin order and, when
 * that replica refuses the connection (its process is gone), tries the following ones before giving up
 * (the client's connection is then reset, as a Service without ready endpoints does).
 *
 * What it models and what not: kube-proxy balances per connection too (keep-alive connections stay on
 * one endpoint). It does not retry a refused connect: it removes the endpoint once the Pod is not
 * ready, a few seconds after it died. Skipping a replica whose connect fails is that removal without
 * the delay; a connection open to a replica when it dies is reset either way and the client retries
 * (the boot agents and sim hosts retry on connection errors). Ports are on 127.0.0.1 only.
 */
import { connect, createServer, type Server, type Socket } from 'node:net';

export interface ServiceProxy {
  /** `http://127.0.0.1:<port>`. */
  readonly url: string;
  readonly port: number;
  /** Connections handed to each backend so far, by backend index. */
  readonly connections: number[];
  /** Client connections reset because no backend accepted them. */
  readonly refused: number;
  close(): Promise<void>;
}

/** Listens on 127.0.0.1:`port` (0: any free port) and forwards to `backends` (ports on 127.0.0.1). */
export async function startServiceProxy(backends: number[], port = 0): Promise<ServiceProxy> {
  if (backends.length === 0) throw new Error('a service needs at least one backend');
  const connections = backends.map(() => 0);
  let refused = 0;
  let next = 0;
  const open = new Set<Socket>();
  const track = (s: Socket) => {
    open.add(s);
    s.once('close', () => open.delete(s));
  };
  const forward = (client: Socket, tried: number): void => {
    if (tried >= backends.length || client.destroyed) {
      refused++;
      client.resetAndDestroy();
      return;
    }
    const i = next;
    next = (next + 1) % backends.length;
    const upstream = connect({ host: '127.0.0.1', port: backends[i]! });
    track(upstream);
    let connected = false;
    upstream.once('connect', () => {
      connected = true;
      connections[i]!++;
      client.pipe(upstream);
      upstream.pipe(client);
      client.resume();
    });
    upstream.on('error', () => {
      if (!connected) forward(client, tried + 1);
      else client.destroy();
    });
    client.on('error', () => upstream.destroy());
    client.once('close', () => upstream.destroy());
    upstream.once('close', () => {
      if (connected) client.destroy();
    });
  };
  const server: Server = createServer({ pauseOnConnect: true }, (client) => {
    track(client);
    client.on('error', () => undefined);
    forward(client, 0);
  });
  await new Promise<void>((ok, fail) => {
    server.once('error', fail);
    server.listen(port, '127.0.0.1', () => ok());
  });
  const bound = (server.address() as import('node:net').AddressInfo).port;
  return {
    url: `http://127.0.0.1:${bound}`,
    port: bound,
    connections,
    get refused() {
      return refused;
    },
    close: async () => {
      const closed = new Promise<void>((ok) => server.close(() => ok()));
      for (const s of open) s.destroy();
      await closed;
    },
  };
}
