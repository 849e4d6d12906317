/**
 * Where a running local stack is recorded, so `local down`, `local status` and `get` in another
 * terminal find it: `<dir>/state.json` written by the `local serve` daemon once its stack is up.
 */
import { existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import type { StackShape } from './stack-shape.js';

export interface LocalState {
  pid: number;
  kubeconfig: string;
  backend: string;
  servers: number;
  bmcUrl: string;
  registryUrl: string;
  bootServerUrl: string;
  metricsUrl: string;
  managerLog: string;
  startedAt: string;
  /** OCI reference of the example claim's image in the local registry (local-images.ts). */
  osImage?: string;
  /** Firmware, network, boot method and BMC profile, as asked and as made (stack-shape.ts). */
  shape?: StackShape;
}

/** Default folder of the local stack (`$METAL_CACHE/local`). */
export function defaultLocalDir(): string {
  return join(process.env.METAL_CACHE ?? join(homedir(), '.cache', 'metal-operator-ts'), 'local');
}

export const statePath = (dir: string) => join(dir, 'state.json');
export const progressPath = (dir: string) => join(dir, 'progress.log');
/** Pid of the `local serve` daemon, written as soon as it starts (before the stack is ready). */
export const daemonPidPath = (dir: string) => join(dir, 'daemon.pid');

/** Pid of a running daemon (ready or still starting), if any. */
export function runningDaemon(dir: string): number | undefined {
  const p = daemonPidPath(dir);
  if (!existsSync(p)) return undefined;
  const pid = Number(readFileSync(p, 'utf8').trim());
  if (Number.isInteger(pid) && pid > 0 && alive(pid)) return pid;
  rmSync(p, { force: true });
  return undefined;
}

/** True while process `pid` exists (signal 0 probes without sending anything). */
export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** The recorded stack if its daemon still runs; a stale record is removed. */
export function readLocalState(dir: string): LocalState | undefined {
  const p = statePath(dir);
  if (!existsSync(p)) return undefined;
  const state = JSON.parse(readFileSync(p, 'utf8')) as LocalState;
  if (alive(state.pid)) return state;
  rmSync(p, { force: true });
  return undefined;
}

export function writeLocalState(dir: string, state: LocalState): void {
  writeFileSync(statePath(dir), `${JSON.stringify(state, null, 2)}\n`);
}
