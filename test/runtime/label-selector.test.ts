/** Equality-based label selectors (Kubernetes API conventions): parsing and matching; set-based forms are refused. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { matchesTerms, parseEqualitySelector } from '../../src/runtime/label-selector.js';

const matches = (sel: string, labels?: Record<string, string>) => {
  const t = parseEqualitySelector(sel);
  assert.ok(t, `parsed ${sel}`);
  return matchesTerms(t, labels);
};

describe('label selector (equality-based)', () => {
  it('matches =, ==, !=, exists and !exists, all terms together', () => {
    assert.equal(matches('', {}), true);
    assert.equal(matches('a=1', { a: '1' }), true);
    assert.equal(matches('a==1', { a: '1' }), true);
    assert.equal(matches('a=1', { a: '2' }), false);
    assert.equal(matches('a=1', undefined), false);
    assert.equal(matches('a!=1', {}), true);
    assert.equal(matches('a!=1', { a: '1' }), false);
    assert.equal(matches('a', { a: '' }), true);
    assert.equal(matches('a', {}), false);
    assert.equal(matches('!a', {}), true);
    assert.equal(matches('!a', { a: 'x' }), false);
    assert.equal(
      matches('metal.ironcore.dev/callback=true,scope=x', { 'metal.ironcore.dev/callback': 'true' }),
      false,
    );
    assert.equal(
      matches('metal.ironcore.dev/callback=true, scope=x', {
        'metal.ironcore.dev/callback': 'true',
        scope: 'x',
      }),
      true,
    );
  });

  it('refuses set-based terms instead of guessing', () => {
    assert.equal(parseEqualitySelector('env in (a,b)'), undefined);
    assert.equal(parseEqualitySelector('env notin (a)'), undefined);
  });
});
