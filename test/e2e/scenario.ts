/**
 * Steps the end-to-end tests share: discover the VMs once per file (the expensive part, in a
 * `before` hook), claim a server and wait for `Booted=True` (or establish that precondition when a
 * test needs a booted claim: {@link ensureBooted}), check that every expected SBC condition is True
 * for attempt 1, check that a NetBootOnce server boots from disk after completion, and delete a claim
 * once done with it ({@link deleteClaim}). No test relies on what another test did: each one either
 * creates what it needs or establishes it here, so a test run alone (`--test-name-pattern`) passes.
 * They read the real system only (API objects, the manager's JSON log, the virtual BMC's request
 * log), and throw with the evidence when an expectation fails.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { API_VERSION } from '../../src/api/v1alpha1/schema.js';
import type { Server } from '../../src/api/v1alpha1/server.js';
import type { ServerBootConfiguration } from '../../src/api/v1alpha1/serverbootconfiguration.js';
import type { ServerClaim } from '../../src/api/v1alpha1/serverclaim.js';
import { waitFor } from '../../src/localstack/control-plane.js';
import type { LocalStack } from '../../src/localstack/local-stack.js';
import { Resources } from '../../src/runtime/resource.js';
import type { QemuHost } from '../../src/virtualbmc/qemu.js';

export const NS = 'default';

export interface LogLine {
  msg?: string;
  server?: string;
  systemUUID?: string;
  client?: string;
  time?: string;
  [k: string]: unknown;
}

/** The manager's log as parsed JSON lines (registry and boot server log there too). */
export function managerLines(stack: LocalStack): LogLine[] {
  return readFileSync(stack.managerLog, 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((l) => {
      try {
        return JSON.parse(l) as LogLine;
      } catch {
        return {};
      }
    });
}

export async function getClaim(stack: LocalStack, name: string): Promise<ServerClaim> {
  return (await stack.client.get<ServerClaim>(Resources.ServerClaim, name, NS))!;
}

export async function sbcOf(
  stack: LocalStack,
  serverName: string,
): Promise<ServerBootConfiguration | undefined> {
  const srv = await stack.client.get<Server>(Resources.Server, serverName);
  const ref = srv?.spec.bootConfigurationRef;
  return ref
    ? stack.client.get<ServerBootConfiguration>(Resources.ServerBootConfiguration, ref.name, ref.namespace)
    : undefined;
}

function vmTail(stack: LocalStack, uuid: string): string {
  const host = stack.hosts.find((h) => h.identity.uuid === uuid) as QemuHost | undefined;
  try {
    return host ? readFileSync(host.serialLogPath, 'utf8').split('\n').slice(-15).join('\n') : '';
  } catch {
    return '';
  }
}

/**
 * The shared precondition of every test of a file: `count` Servers discovered, `Available` and
 * powered Off (discovery ends with a power-off that the Server status observes on a later BMC read;
 * a claim made before that would start with another power action). Returns them.
 */
export async function discoverSettled(
  stack: LocalStack,
  count: number,
  timeoutMs: number,
): Promise<Server[]> {
  const t0 = Date.now();
  await stack.waitForDiscovery(count, timeoutMs);
  let servers: Server[] = [];
  await waitFor(`${count} Available servers powered off`, 120_000, async () => {
    servers = (await stack.client.list<Server>(Resources.Server)).items;
    return (
      servers.length === count &&
      servers.every((x) => x.status?.state === 'Available' && x.status?.powerState === 'Off')
    );
  });
  console.log(`# discovery of ${count} VM(s) took ${((Date.now() - t0) / 1000).toFixed(1)} s`);
  return servers;
}

/**
 * A test's precondition "claim `name` on `serverName` is Booted=True": a claim found Booted is
 * used as it is; otherwise it is created (if missing) and waited for. Tests that need a booted claim
 * call this instead of relying on an earlier test having booted it.
 */
export async function ensureBooted(
  stack: LocalStack,
  name: string,
  serverName: string,
  spec: Record<string, unknown>,
  timeoutMs: number,
): Promise<void> {
  const existing = await stack.client.get<ServerClaim>(Resources.ServerClaim, name, NS);
  if (!existing) {
    await claimAndWaitBooted(stack, name, serverName, spec, timeoutMs);
    return;
  }
  assert.equal(existing.spec.serverRef?.name, serverName, `claim ${name} is for ${serverName}`);
  await waitFor(`claim ${name} Booted`, timeoutMs, async () => {
    const c = await getClaim(stack, name);
    return c.status?.conditions?.some((x) => x.type === 'Booted' && x.status === 'True') ?? false;
  });
}

/**
 * Deletes claim `name` (when it exists) and waits until it is gone and `serverName` is Available
 * again: the claim is released once the BMC reports the Server Off.
 */
export async function deleteClaim(
  stack: LocalStack,
  name: string,
  serverName: string,
  timeoutMs = 120_000,
): Promise<void> {
  await stack.client.delete(Resources.ServerClaim, name, NS).catch(() => undefined);
  await waitFor(`claim ${name} deleted and ${serverName} Available`, timeoutMs, async () => {
    if (await stack.client.get<ServerClaim>(Resources.ServerClaim, name, NS)) return false;
    const srv = await stack.client.get<Server>(Resources.Server, serverName);
    return srv?.status?.state === 'Available' && !srv.spec.serverClaimRef;
  });
}

/** Creates claim `name` (power On) for `serverName` and waits for `Booted=True`; returns the seconds it took. */
export async function claimAndWaitBooted(
  stack: LocalStack,
  name: string,
  serverName: string,
  spec: Record<string, unknown>,
  timeoutMs: number,
): Promise<number> {
  await stack.client.create(Resources.ServerClaim, {
    apiVersion: API_VERSION,
    kind: 'ServerClaim',
    metadata: { name, namespace: NS },
    spec: { power: 'On', serverRef: { name: serverName }, ...spec },
  });
  const t0 = Date.now();
  await waitFor(`claim ${name} Booted`, timeoutMs, async () => {
    const c = await getClaim(stack, name);
    return c.status?.conditions?.some((x) => x.type === 'Booted' && x.status === 'True') ?? false;
  }).catch(async (err) => {
    const srv = await stack.client.get<Server>(Resources.Server, serverName);
    const c = await getClaim(stack, name);
    throw new Error(
      `${String(err)}\nclaim status: ${JSON.stringify(c.status)}\nserial tail:\n${vmTail(stack, srv?.spec.systemUUID ?? '')}`,
    );
  });
  const seconds = (Date.now() - t0) / 1000;
  console.log(`# claim ${name} to Booted: ${seconds.toFixed(1)} s`);
  return seconds;
}

/** Asserts the claim is on attempt 1 and each of `conditions` is True on the SBC for that attempt. */
export async function assertBootedAttempt1(
  stack: LocalStack,
  claimName: string,
  serverName: string,
  conditions: string[],
): Promise<ServerBootConfiguration> {
  const c = await getClaim(stack, claimName);
  assert.equal(c.status?.boot?.attempt, 1);
  const sbc = (await sbcOf(stack, serverName))!;
  assertConditionsOfCurrentAttempt(sbc, conditions);
  return sbc;
}

/**
 * Each of `conditions` is True on `sbc` and was observed at or after the generation its current
 * attempt began (`status.attemptGeneration`, or `metadata.generation` on an SBC not stamped yet:
 * the SBC contract in src/controllers/common/boot-configuration.ts). Both generations must be there: a
 * condition without `observedGeneration` proves nothing about which attempt it belongs to.
 */
export function assertConditionsOfCurrentAttempt(
  sbc: Pick<ServerBootConfiguration, 'metadata' | 'status'>,
  conditions: string[],
): void {
  const attemptGeneration = sbc.status?.attemptGeneration ?? sbc.metadata?.generation;
  assert.ok(
    typeof attemptGeneration === 'number' && attemptGeneration >= 1,
    `the SBC has an attempt generation: ${JSON.stringify({ metadata: sbc.metadata, status: sbc.status })}`,
  );
  for (const type of conditions) {
    const cond = sbc.status?.conditions?.find((x) => x.type === type);
    assert.equal(cond?.status, 'True', `${type}: ${JSON.stringify(sbc.status?.conditions)}`);
    assert.ok(
      typeof cond.observedGeneration === 'number' && cond.observedGeneration >= attemptGeneration,
      `${type} belongs to the current attempt (generation ${attemptGeneration}): ${JSON.stringify(cond)}`,
    );
  }
}

/**
 * NetBootOnce after completion: power the claim Off, then On, and assert the firmware's network
 * request (its boot order lists the network after the empty disk) is answered with a local-boot
 * script, that no image script or HTTP-boot file is served and no network override reaches the BMC.
 */
export async function assertNetBootOnceBootsFromDisk(
  stack: LocalStack,
  claimName: string,
  server: Server,
  timeoutMs = 300_000,
): Promise<void> {
  const target = server.metadata.name!;
  const uuid = server.spec.systemUUID;
  const power = async (want: 'On' | 'Off') => {
    await stack.client.mergePatch(Resources.ServerClaim, claimName, NS, { spec: { power: want } });
    await waitFor(
      `server ${want}`,
      120_000,
      async () => (await stack.client.get<Server>(Resources.Server, target))?.status?.powerState === want,
    );
  };
  await power('Off');
  const mark = new Date().toISOString();
  stack.vbmc.clearRequests();
  await power('On');
  await waitFor('the VM asked the boot server and was told to boot locally', timeoutMs, () =>
    managerLines(stack).some(
      (l) => (l.time ?? '') > mark && l.systemUUID === uuid && /local boot/.test(l.msg ?? ''),
    ),
  ).catch((err) => {
    const mine = managerLines(stack)
      .filter((l) => (l.time ?? '') > mark && (l.systemUUID === uuid || l.server === target))
      .map((l) => JSON.stringify(l).slice(0, 300));
    throw new Error(
      `${String(err)}\nmanager lines since power-on:\n${mine.join('\n')}\nserial tail:\n${vmTail(stack, uuid)}`,
    );
  });
  const served = managerLines(stack).filter(
    (l) =>
      (l.time ?? '') > mark &&
      l.systemUUID === uuid &&
      (l.msg === 'iPXE script served' || l.msg === 'HTTP boot file served'),
  );
  assert.deepEqual(served, [], 'no image script or boot file after completion');
  const overrides = stack.vbmc
    .requests()
    .filter((r) => r.method === 'PATCH' && /"(Pxe|UefiHttp)"/.test(JSON.stringify(r.body ?? {})));
  assert.deepEqual(overrides, [], 'no network-boot override at the BMC');
}
