/**
 * A TCP proxy in front of kube-apiserver whose traffic can be held: while paused, bytes in both
 * directions are kept in order (in memory) and delivered on resume, so a client behind it sees its
 * watches stall and its requests hang, as behind an API server that is slow to come back — a fault
 * injector, like the virtual BMC's. TLS passes through untouched (the API server's certificate is
 * for 127.0.0.1, whatever the port).
 */
import { createServer, type Server, Socket } from 'node:net';

export interface PausableProxy {
  /** `https://127.0.0.1:<port>`: the API server, through the proxy. */
  url: string;
  pause(): void;
  resume(): void;
  close(): Promise<void>;
}

/** Starts a proxy on a free loopback port to `target` (an `https://host:port` URL). */
export async function startPausableProxy(target: string): Promise<PausableProxy> {
  const to = new URL(target);
  let paused = false;
  const held: Array<() => void> = [];
  const sockets = new Set<Socket>();
  const forward = (from: Socket, into: Socket) => {
    from.on('data', (chunk: Buffer) => {
      if (paused) held.push(() => into.write(chunk));
      else into.write(chunk);
    });
    // An end or a reset keeps its place behind the bytes held before it.
    from.on('end', () => (paused ? held.push(() => into.end()) : into.end()));
    from.on('error', () => (paused ? held.push(() => into.destroy()) : into.destroy()));
    from.on('close', () => sockets.delete(from));
  };
  const server: Server = createServer((client) => {
    const upstream = new Socket();
    sockets.add(client);
    sockets.add(upstream);
    upstream.connect(Number(to.port || 443), to.hostname);
    forward(client, upstream);
    forward(upstream, client);
  });
  await new Promise<void>((ok) => server.listen(0, '127.0.0.1', ok));
  const port = (server.address() as { port: number }).port;
  return {
    url: `https://127.0.0.1:${port}`,
    pause() {
      paused = true;
    },
    resume() {
      paused = false;
      for (const deliver of held.splice(0)) deliver();
    },
    async close() {
      for (const s of sockets) s.destroy();
      await new Promise<void>((ok) => server.close(() => ok()));
    },
  };
}
