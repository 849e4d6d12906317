/** Unit tests of the ignition Secret hand-over (src/ignition/validated-secrets.ts): pure bookkeeping. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { type SecretUse, ValidatedSecrets } from '../../src/ignition/validated-secrets.js';

const use = (uid: string, generation = 1, name = 'ign'): SecretUse => ({
  uid,
  generation,
  namespace: 'ns',
  name,
});
const secret = (rv: string, data = 'e30=') => ({
  metadata: { name: 'ign', namespace: 'ns', resourceVersion: rv },
  data: { ignition: data },
});

describe('ValidatedSecrets', () => {
  it('hands the validated version over once, for the same SBC generation and Secret name', () => {
    const v = new ValidatedSecrets();
    v.handOver(use('a'), secret('7'), 1_000);
    assert.equal(v.take(use('a'), 1_500)?.metadata.resourceVersion, '7');
    assert.equal(v.take(use('a'), 1_600), undefined, 'taken once: the next fetch reads fresh');
    v.handOver(use('a'), secret('8'), 2_000);
    assert.equal(v.take(use('a', 2), 2_100), undefined, 'another attempt (generation) reads fresh');
    v.handOver(use('a'), secret('9'), 3_000);
    assert.equal(v.take(use('a', 1, 'other'), 3_100), undefined, 'another Secret name reads fresh');
    assert.deepEqual(v.size, { entries: 0, bytes: 0 });
  });

  it('an entry older than maxAgeMs is not served (an edit is seen at the latest that long after)', () => {
    const v = new ValidatedSecrets({ maxAgeMs: 60_000 });
    v.handOver(use('a'), secret('7'), 0);
    assert.equal(v.take(use('a'), 60_001), undefined);
    v.handOver(use('b'), secret('7'), 0);
    v.handOver(use('c'), secret('8'), 70_000);
    assert.deepEqual(v.size.entries, 1, 'expired entries are dropped when new ones come');
  });

  it('memory is bounded by entries and bytes, oldest out; an oversized Secret is not kept', () => {
    const v = new ValidatedSecrets({ maxEntries: 2, maxBytes: 10 });
    v.handOver(use('a'), secret('1', 'xxxx'), 0);
    v.handOver(use('b'), secret('2', 'xxxx'), 1);
    v.handOver(use('c'), secret('3', 'xxxx'), 2);
    assert.deepEqual(v.size, { entries: 2, bytes: 8 });
    assert.equal(v.take(use('a'), 3), undefined, 'the oldest went first');
    v.handOver(use('d'), secret('4', 'xxxxxxxx'), 4);
    assert.ok(v.size.bytes <= 10, `bytes ${v.size.bytes}`);
    v.handOver(use('e'), secret('5', 'x'.repeat(11)), 5);
    assert.equal(v.take(use('e'), 6), undefined, 'over maxBytes: not kept');
  });
});
