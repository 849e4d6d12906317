/** Unit tests: an unbound claim is explained like a pending pod; ImageNotFound lists the catalog. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { Server } from '../../src/api/v1alpha1/server.js';
import type { ServerClaim } from '../../src/api/v1alpha1/serverclaim.js';
import { unboundExplanation } from '../../src/controllers/common/server-selection.js';
import { ImageCatalog } from '../../src/oci/image-catalog.js';

let n = 0;
const server = (
  spec: Partial<Server['spec']> = {},
  state = 'Available',
  labels: Record<string, string> = {},
): Server => {
  n++;
  return {
    metadata: { name: `s${n}`, labels, creationTimestamp: `2026-01-01T00:00:${String(n).padStart(2, '0')}Z` },
    spec: { systemUUID: `00000000-0000-0000-0000-${String(n).padStart(12, '0')}`, ...spec },
    status: { state },
  };
};
const claim = (spec: Partial<ServerClaim['spec']> = {}): ServerClaim => ({
  metadata: { name: 'c', namespace: 'ns', uid: 'u' },
  spec: { power: 'On', image: 'i', ...spec },
});

test('0/7 servers: counted by reason, most frequent first, like the scheduler', () => {
  const fleet = [
    ...Array.from({ length: 5 }, (_, i) =>
      server({ serverClaimRef: { name: `t${i}`, namespace: 'ns' } }, 'Reserved'),
    ),
    server({ unclaimable: true }),
    server({ taints: [{ key: 'maintenance', value: 'disk-swap', effect: 'NoBind' }] }),
  ];
  assert.deepEqual(unboundExplanation(claim(), fleet), {
    reason: 'NoServerAvailable',
    message: '0/7 servers: 5 claimed, 1 taint maintenance=disk-swap:NoBind not tolerated, 1 unclaimable',
  });
  const withSel = unboundExplanation(claim({ serverSelector: { matchLabels: { rack: 'a' } } }), [
    server({}, 'Available', { rack: 'b' }),
    server({}, 'Discovery', { rack: 'a' }),
  ]);
  assert.equal(
    withSel.message,
    '0/2 servers: 1 in state Discovery, not Available, 1 not matching the selector',
  );
  assert.equal(unboundExplanation(claim(), []).message, '0/0 servers');
  assert.match(unboundExplanation(claim(), [server()], 1).message, /^0\/1 servers: 1 taken meanwhile$/);
});

test('a claim naming its Server says what is wrong with that one', () => {
  const s = server({ taints: [{ key: 'metal.ironcore.dev/maintenance', effect: 'NoBind' }] }, 'Maintenance');
  assert.deepEqual(unboundExplanation(claim({ serverRef: { name: s.metadata.name! } }), [s]), {
    reason: 'ServerNotAvailable',
    message: `Server ${s.metadata.name} is taint metal.ironcore.dev/maintenance:NoBind not tolerated`,
  });
  assert.deepEqual(unboundExplanation(claim({ serverRef: { name: 'nope' } }), [s]), {
    reason: 'ServerNotFound',
    message: 'Server nope does not exist',
  });
});

test('ImageNotFound names the catalog and the images it knows', () => {
  const cat = ImageCatalog.parse(
    'images:\n  os/b:1: {kernel: /k, initrd: /i}\n  os/a:1: {kernel: /k, initrd: /i}\n',
    'file /etc/images.yaml',
  );
  const r = cat.resolve('os/c:1');
  assert.equal(r.ok, false);
  assert.equal(
    !r.ok && r.message,
    'image os/c:1 is not in the image catalog (file /etc/images.yaml); known images: os/a:1, os/b:1',
  );
  const none = ImageCatalog.empty().resolve('x');
  assert.match(
    !none.ok ? none.message : '',
    /\(none configured: --image-catalog or --image-catalog-configmap\); the catalog is empty$/,
  );
});
