/**
 * Issue 31 item 3: the ServerReadinessRule controller, mirroring upstream's
 * serverreadinessrule(_server)_controller_test.go — Continuous taints and untaints as the condition
 * changes, BootstrapOnly untaints once and marks the Server, the finalizer removes the taint on
 * delete — and a rule gating on this project's `Booted` Server condition (the bound claim's last
 * attempt). Real API server, sim virtual BMC.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, test } from 'node:test';
import type { Server } from '../../src/api/v1alpha1/server.js';
import type { ServerReadinessRule } from '../../src/api/v1alpha1/serverreadinessrule.js';
import {
  BOOTSTRAP_COMPLETED_PREFIX,
  READINESS_FINALIZER,
} from '../../src/controllers/server/readiness-rules.js';
import { applyCondition } from '../../src/runtime/condition-writer.js';
import { Resources } from '../../src/runtime/resource.js';
import { releaseSharedCluster } from '../harness/shared.js';
import {
  API,
  availableServers,
  cond,
  createClaim,
  eventually,
  getClaim,
  SCOPE_LABEL,
  type Stack,
  withStack,
} from './fixture.js';

after(releaseSharedCluster);

const getServer = (s: Stack, name: string) => s.client.get<Server>(Resources.Server, name);

function rule(
  s: Stack,
  name: string,
  mode: 'Continuous' | 'BootstrapOnly',
  type: string,
  taintKey: string,
): Promise<ServerReadinessRule> {
  return s.client.create<ServerReadinessRule>(Resources.ServerReadinessRule, {
    apiVersion: API,
    kind: 'ServerReadinessRule',
    metadata: { name: `${name}-${s.ns}`.slice(0, 63), labels: s.labels },
    spec: {
      serverSelector: { matchLabels: { [SCOPE_LABEL]: s.scope } },
      conditions: [{ type, requiredStatus: 'True' }],
      enforcementMode: mode,
      taint: { key: taintKey, value: 'pending', effect: 'NoBind' },
    },
  });
}

async function setCondition(s: Stack, server: string, type: string, status: 'True' | 'False') {
  const x = (await getServer(s, server))!;
  await applyCondition(
    s.client,
    Resources.Server,
    x,
    { type, status, reason: status === 'True' ? 'CheckPassed' : 'CheckFailed', message: 'by the test' },
    `test-${type}`,
  );
}

const tainted = (x: Server | undefined, key: string) => (x?.spec.taints ?? []).some((t) => t.key === key);

/**
 * Deletes the rules and waits until they are gone: their finalizer is removed by the running manager,
 * so a stack closed (manager stopped) before that would leave them terminating for good.
 */
async function deleteRules(s: Stack, ...rules: ServerReadinessRule[]): Promise<void> {
  for (const r of rules) await s.client.delete(Resources.ServerReadinessRule, r.metadata.name!);
  await eventually('the deleted rules gone (finalizer removed)', 20_000, async () => {
    for (const r of rules)
      if (await s.client.get(Resources.ServerReadinessRule, r.metadata.name!)) return false;
    return true;
  });
}

function waitTaint(s: Stack, server: string, key: string, want: boolean, timeoutMs = 15_000) {
  return eventually(`${server} ${want ? 'tainted' : 'untainted'} ${key}`, timeoutMs, async () => {
    const x = await getServer(s, server);
    return tainted(x, key) === want ? x : undefined;
  });
}

test('Continuous: tainted without the condition, untainted with it, tainted again when it turns False; the finalizer removes the taint on delete', {
  timeout: 90_000,
}, async () => {
  await withStack('readiness-cont', { hosts: 1 }, async (s) => {
    const [srv] = await availableServers(s, 1);
    const name = srv!.metadata.name!;
    const r = await rule(s, 'cont', 'Continuous', 'ExternalBurnIn', 'example.com/burn-in');
    const withTaint = await waitTaint(s, name, 'example.com/burn-in', true);
    assert.deepEqual(
      withTaint.spec.taints?.find((t) => t.key === 'example.com/burn-in'),
      { key: 'example.com/burn-in', value: 'pending', effect: 'NoBind' },
    );
    await eventually('finalizer on the rule', 10_000, async () => {
      const x = await s.client.get<ServerReadinessRule>(Resources.ServerReadinessRule, r.metadata.name!);
      return x?.metadata.finalizers?.includes(READINESS_FINALIZER);
    });
    await setCondition(s, name, 'ExternalBurnIn', 'True');
    await waitTaint(s, name, 'example.com/burn-in', false);
    await setCondition(s, name, 'ExternalBurnIn', 'False');
    await waitTaint(s, name, 'example.com/burn-in', true);
    // Upstream: "should remove the taint when the rule is deleted" (the finalizer).
    await s.client.delete(Resources.ServerReadinessRule, r.metadata.name!);
    await eventually(
      'rule gone',
      15_000,
      async () => !(await s.client.get(Resources.ServerReadinessRule, r.metadata.name!)),
    );
    const x = await getServer(s, name);
    assert.equal(tainted(x, 'example.com/burn-in'), false, 'the deleted rule took its taint along');
  });
});

test('BootstrapOnly: untainted once the condition holds, marked, and never tainted again', {
  timeout: 90_000,
}, async () => {
  await withStack('readiness-boot', { hosts: 1 }, async (s) => {
    const [srv] = await availableServers(s, 1);
    const name = srv!.metadata.name!;
    const r = await rule(s, 'boot', 'BootstrapOnly', 'ExternalFirmware', 'example.com/firmware');
    await waitTaint(s, name, 'example.com/firmware', true);
    await setCondition(s, name, 'ExternalFirmware', 'True');
    const passed = await waitTaint(s, name, 'example.com/firmware', false);
    const mark = `${BOOTSTRAP_COMPLETED_PREFIX}${r.metadata.name}`;
    await eventually(
      'bootstrap-completed annotation',
      10_000,
      async () => (await getServer(s, name))?.metadata.annotations?.[mark] === 'true',
    );
    assert.ok(passed);
    // Positive control instead of a fixed window: a Continuous rule on the same condition is tainted
    // when it turns False. Both rules are evaluated in one pass per Server (one patch), so once the
    // control's taint is there the BootstrapOnly rule has seen the False condition too.
    const control = await rule(
      s,
      'boot-control',
      'Continuous',
      'ExternalFirmware',
      'example.com/firmware-control',
    );
    await eventually('finalizer on the control rule (the rule is cached)', 10_000, async () => {
      const x = await s.client.get<ServerReadinessRule>(
        Resources.ServerReadinessRule,
        control.metadata.name!,
      );
      return x?.metadata.finalizers?.includes(READINESS_FINALIZER);
    });
    await setCondition(s, name, 'ExternalFirmware', 'False');
    const after = await waitTaint(s, name, 'example.com/firmware-control', true);
    assert.equal(tainted(after, 'example.com/firmware'), false, 'not tainted again');
    await deleteRules(s, r, control);
  });
});

test("a rule can gate on the Server's Booted condition, the bound claim's last attempt", {
  timeout: 90_000,
}, async () => {
  await withStack('readiness-booted', { hosts: 1 }, async (s) => {
    const [srv] = await availableServers(s, 1);
    const name = srv!.metadata.name!;
    await createClaim(s, 'tenant', { serverRef: name, timeout: '20s' });
    await eventually(
      'claim Booted',
      30_000,
      async () => cond(await getClaim(s, 'tenant'), 'Booted')?.status === 'True',
    );
    const booted = await eventually('Server Booted=True', 10_000, async () => {
      const x = await getServer(s, name);
      return cond(x, 'Booted')?.status === 'True' ? x : undefined;
    });
    assert.equal(cond(booted, 'Booted')?.reason, 'BootCompleted');
    assert.match(cond(booted, 'Booted')!.message, new RegExp(`ServerClaim ${s.ns}/tenant: `));
    const r = await rule(s, 'booted', 'Continuous', 'Booted', 'example.com/not-booted');
    // Positive control instead of a fixed window: a rule created after it on a condition the Server
    // does not have taints it. The Server's pass reads every cached rule (the Booted rule was cached
    // first, same watch) and writes all taints in one patch, so the Booted rule was evaluated by then.
    const control = await rule(s, 'booted-control', 'Continuous', 'NeverReported', 'example.com/control');
    const after = await waitTaint(s, name, 'example.com/control', true);
    assert.equal(tainted(after, 'example.com/not-booted'), false, 'Booted=True passes');
    await deleteRules(s, r, control);
  });
});

test('a deleted rule takes its taint off the Servers this operator manages only (--object-selector)', {
  timeout: 60_000,
}, async () => {
  await withStack('readiness-scope', { hosts: 0 }, async (s) => {
    const key = 'example.com/scoped';
    const taint = { key, value: 'pending', effect: 'NoBind' as const };
    const rack = { 'example.com/rack': `r-${s.ns}`.slice(0, 63) };
    const r = await s.client.create<ServerReadinessRule>(Resources.ServerReadinessRule, {
      apiVersion: API,
      kind: 'ServerReadinessRule',
      metadata: { name: `scope-${s.ns}`.slice(0, 63), labels: s.labels },
      spec: {
        serverSelector: { matchLabels: rack },
        conditions: [{ type: 'ExternalBurnIn', requiredStatus: 'True' }],
        enforcementMode: 'Continuous',
        taint,
      },
    });
    // One Server of this operator (its object selector's label) and one of another operator's
    // scope carrying the same taint; both match the rule's selector.
    const server = (name: string, labels: Record<string, string>, taints: (typeof taint)[]) =>
      s.client.create<Server>(Resources.Server, {
        apiVersion: API,
        kind: 'Server',
        metadata: { name: `${name}-${s.ns}`.slice(0, 63), labels: { ...rack, ...labels } },
        spec: { systemUUID: randomUUID(), taints },
      } as Server);
    const ours = await server('ours', s.labels, []);
    const foreign = await server('foreign', { [SCOPE_LABEL]: `another-${s.scope}`.slice(0, 63) }, [taint]);
    try {
      await waitTaint(s, ours.metadata.name!, key, true);
      await deleteRules(s, r);
      assert.equal(tainted(await getServer(s, ours.metadata.name!), key), false, 'ours: taint removed');
      assert.equal(
        tainted(await getServer(s, foreign.metadata.name!), key),
        true,
        "another operator's Server: left as it was",
      );
    } finally {
      for (const x of [ours, foreign])
        await s.client.delete(Resources.Server, x.metadata.name!).catch(() => {});
    }
  });
});
