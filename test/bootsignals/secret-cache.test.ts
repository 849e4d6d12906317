/**
 * Security reviews S15, N13 and N9 (issue 29), what the signal servers hold of Secrets: nothing
 * cached. Callback tokens are derived from one key (src/bootauth/callback-token.ts), so the stack
 * reads exactly one Secret by name at start (the key, `--callback-key-secret`) and, per boot, the
 * ignition Secret the SBC names; it lists and watches no Secret. A Secret labelled the way callback
 * Secrets once were, however large, is never read. Fails on the code before N9, whose stack kept
 * a Secret informer (`list` + `watch` of every labelled Secret in the cluster).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Resources, type SecretObject } from '../../src/runtime/resource.js';
import { bearer, postJson, seedBootTarget, type TestStack, useSignalStack, waitCached } from './fixture.js';

describe('callback Secret cache', () => {
  const fx = useSignalStack('sec-cache', { keyFromSecret: true });

  /** `verb` → count of the stack's API requests on Secrets so far. */
  const secretRequests = async (stack: TestStack) => {
    const out: Record<string, number> = {};
    for (const v of (await stack.metrics.getSingleMetric('metal_api_requests_total')?.get())?.values ?? [])
      if (v.labels.resource === 'secrets')
        out[String(v.labels.verb)] = (out[String(v.labels.verb)] ?? 0) + v.value;
    return out;
  };

  it('S15/N13/N9: no Secret is listed or watched; a labelled Secret is never read; a callback still verifies', async () => {
    await fx.client.create<SecretObject>(Resources.Secret, {
      apiVersion: 'v1',
      kind: 'Secret',
      metadata: {
        name: 'tenant-blob',
        namespace: fx.namespace.name,
        labels: { 'metal.ironcore.dev/callback': 'true' },
      },
      data: { blob: Buffer.alloc(512 * 1024, 7).toString('base64') },
    });
    const s = await seedBootTarget(fx.client, fx.namespace.name, { withIgnition: true });
    await waitCached(fx.stack, s);
    assert.equal((await fetch(`${fx.stack.bootUrl}/ignition/${s.uuid}?token=${s.token}`)).status, 200);
    const reg = await postJson(
      `${fx.stack.registryUrl}/register`,
      { systemUUID: s.uuid, data: { cpu: 'x' } },
      bearer(s.token),
    );
    assert.equal(reg.status, 201, reg.text);
    const byVerb = await secretRequests(fx.stack);
    assert.deepEqual(
      Object.keys(byVerb).sort(),
      ['get'],
      `Secret requests by verb: ${JSON.stringify(byVerb)}`,
    );
    // The key once at start, the ignition Secret for the one GET above.
    assert.ok((byVerb.get ?? 0) <= 2, `Secret gets: ${byVerb.get}`);
  });
});
