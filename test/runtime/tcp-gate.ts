/**
 * A TCP relay on 127.0.0.1 in front of the API server that a test can shut: `close()` resets every
 * relayed connection and refuses new ones until `open()`. It decides deterministically *when* a
 * client may reconnect, e.g. "only after the test has changed objects and compacted etcd". TLS passes
 * through untouched (the serving certificate is for 127.0.0.1, whatever the port).
 */
import net from 'node:net';

export class TcpGate {
  private readonly sockets = new Set<net.Socket>();
  private isOpen = true;
  /** Connections refused while closed. */
  refused = 0;

  private constructor(
    private readonly server: net.Server,
    readonly port: number,
  ) {}

  static async start(targetPort: number): Promise<TcpGate> {
    let gate!: TcpGate;
    const server = net.createServer((client) => gate.relay(client, targetPort));
    await new Promise<void>((ok) => server.listen(0, '127.0.0.1', ok));
    gate = new TcpGate(server, (server.address() as net.AddressInfo).port);
    return gate;
  }

  open(): void {
    this.isOpen = true;
  }

  /** Resets all relayed connections and refuses new ones. */
  close(): void {
    this.isOpen = false;
    for (const s of this.sockets) s.resetAndDestroy();
    this.sockets.clear();
  }

  async stop(): Promise<void> {
    this.close();
    await new Promise((ok) => this.server.close(ok));
  }

  private relay(client: net.Socket, targetPort: number): void {
    if (!this.isOpen) {
      this.refused++;
      client.resetAndDestroy();
      return;
    }
    const upstream = net.connect(targetPort, '127.0.0.1');
    for (const [a, b] of [
      [client, upstream],
      [upstream, client],
    ] as const) {
      this.sockets.add(a);
      a.on('error', () => b.destroy());
      a.on('close', () => {
        this.sockets.delete(a);
        b.destroy();
      });
    }
    client.pipe(upstream).pipe(client);
  }
}
