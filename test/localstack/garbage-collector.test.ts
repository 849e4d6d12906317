/**
 * Issue 20 item 8: the local stack runs the Kubernetes garbage collector (kube-controller-manager
 * with only `--controllers=garbagecollector`), so deleting a BMC removes its Servers as it would in
 * a cluster. The whole local stack with simulated hosts: control plane, manager, virtual BMC.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import type { Server } from '../../src/api/v1alpha1/server.js';
import { waitFor } from '../../src/localstack/control-plane.js';
import { BMC_NAME, LocalStack } from '../../src/localstack/local-stack.js';
import { Resources } from '../../src/runtime/resource.js';

test('deleting the BMC of the local stack removes its Servers (garbage collector)', {
  timeout: 300_000,
}, async () => {
  const dir = mkdtempSync(join(tmpdir(), 'metal-gc-'));
  const stack = await LocalStack.start({ servers: 2, backend: 'sim', dir });
  try {
    const found = await stack.waitForDiscovery(2, 120_000);
    assert.equal(found.length, 2);
    for (const s of found) assert.equal(s.metadata.ownerReferences?.[0]?.name, BMC_NAME);
    // The manager keeps running, as in a cluster: nothing of ours deletes Servers, the garbage collector does.
    await stack.client.delete(Resources.BMC, BMC_NAME);
    await waitFor('Servers of the deleted BMC gone', 60_000, async () => {
      const { items } = await stack.client.list<Server>(Resources.Server);
      return items.length === 0;
    });
  } finally {
    await stack.stop();
    rmSync(dir, { recursive: true, force: true });
  }
});
