/** Test helpers: an SSH exec session against a virtual BMC console (the `ssh2` client), and a bounded wait. */
import ssh2 from 'ssh2';

/** One SSH exec session: what came back so far, and how it ended. */
export interface SshSession {
  out(): string;
  err(): string;
  write(s: string): void;
  /** Exit status the BMC sent (undefined: none), once the channel closed. */
  closed: Promise<number | undefined>;
  end(): void;
}

/** Logs in with a password and runs `command`; rejects on a connection or authentication error. */
export function sshExec(port: number, user: string, password: string, command: string): Promise<SshSession> {
  return new Promise((resolve, reject) => {
    const conn = new ssh2.Client();
    conn.on('error', reject);
    conn.on('ready', () => {
      conn.exec(command, (err, stream) => {
        if (err) return reject(err);
        let out = '';
        let errText = '';
        let code: number | undefined;
        stream.on('data', (d: Buffer) => {
          out += d.toString('utf8');
        });
        stream.stderr.on('data', (d: Buffer) => {
          errText += d.toString('utf8');
        });
        stream.on('exit', (c: number | null) => {
          code = c ?? undefined;
        });
        const closed = new Promise<number | undefined>((res) =>
          stream.on('close', () => {
            conn.end();
            res(code);
          }),
        );
        resolve({
          out: () => out,
          err: () => errText,
          write: (s) => stream.write(s),
          closed,
          end: () => conn.end(),
        });
      });
    });
    conn.connect({
      host: '127.0.0.1',
      port,
      username: user,
      password,
      tryKeyboard: false,
      readyTimeout: 10_000,
    });
  });
}

/** `p`, or a rejection naming `what` after `ms`: a session that never ends fails the test instead of hanging it. */
export function within<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    p,
    new Promise<T>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${what}: not within ${ms} ms`)), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}
