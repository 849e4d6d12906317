/**
 * Second security review (issue 29), the local control plane's credentials (the harness's real
 * cluster of this run):
 * - N15: the admin token file, the kubeconfig, the service-account key and the serving key are
 *   readable by their owner only, in a folder only the owner may enter.
 */
import assert from 'node:assert/strict';
import { statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { describe, it } from 'node:test';
import { sharedCluster } from '../harness/shared.js';

describe('second security review: local control plane', () => {
  it('N15: cluster-admin credentials are 0600 in a 0700 folder', async () => {
    const cluster = await sharedCluster();
    const dir = dirname(cluster.kubeconfigPath);
    const mode = (p: string) => (statSync(p).mode & 0o777).toString(8);
    assert.equal(mode(dir), '700', dir);
    for (const f of ['kubeconfig', 'tokens.csv', 'sa.key', 'serving.key'])
      assert.equal(mode(join(dir, f)), '600', f);
  });
});
