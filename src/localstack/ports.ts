/**
 * Loopback ports for servers that must keep their port across a restart (a SIGKILLed registry or
 * manager, a stopped kube-apiserver comes back at the same URL) or that are bound by a child
 * process some time after being picked (etcd, kube-apiserver, docker-registry, the manager).
 *
 * A port picked by binding port 0 comes from the kernel's ephemeral range
 * (`/proc/sys/net/ipv4/ip_local_port_range`), which the kernel also hands to every outgoing
 * connection and every other `listen(0)` on the machine: once released, it can be taken before the
 * test binds it again. Ports here are drawn at random from below that range, where the kernel never
 * assigns on its own, and each is checked to be bindable on 127.0.0.1 when picked.
 */
import { readFileSync } from 'node:fs';
import { createServer } from 'node:net';

/** Lowest port drawn from. */
const LOW = 20_000;

/** First port of the kernel's ephemeral range (Linux default 32768). */
function ephemeralStart(): number {
  try {
    const [lo] = readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/);
    const n = Number(lo);
    return Number.isInteger(n) && n > LOW + 1_000 ? n : 32_768;
  } catch {
    return 32_768;
  }
}

function bindable(port: number): Promise<boolean> {
  return new Promise((ok) => {
    const s = createServer();
    s.once('error', () => ok(false));
    s.listen(port, '127.0.0.1', () => s.close(() => ok(true)));
  });
}

/**
 * `count` distinct ports on 127.0.0.1 outside the ephemeral range, each free when returned.
 * Throws after 1,000 tries without enough free ports.
 */
export async function freePorts(count: number): Promise<number[]> {
  const high = ephemeralStart();
  const out: number[] = [];
  for (let tries = 0; out.length < count; tries++) {
    if (tries > 1_000) throw new Error(`freePorts: no ${count} free ports in [${LOW}, ${high})`);
    const port = LOW + Math.floor(Math.random() * (high - LOW));
    if (!out.includes(port) && (await bindable(port))) out.push(port);
  }
  return out;
}
