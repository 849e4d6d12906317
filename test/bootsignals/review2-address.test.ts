/**
 * Second security review (issue 29), address budgets (no cluster: Fastify's inject with chosen
 * remote addresses):
 * - N16: IPv6 clients cannot rotate through their /64 past the per-address 401 budget.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { pino } from 'pino';
import { Registry } from 'prom-client';
import { addressBucket } from '../../src/bootsignals/client-address.js';
import { AUTHENTICATED, createHttpApp } from '../../src/bootsignals/http-app.js';

describe('second security review: address budgets', () => {
  it('N16: addresses of one IPv6 /64 share one 401 budget; another /64 and IPv4 do not', async () => {
    const app = createHttpApp('test', pino({ level: 'silent' }), new Registry(), {
      authFailureLimit: { burst: 20, perSecond: 0.001 },
    });
    app.get('/guarded', AUTHENTICATED, async (_req, reply) =>
      reply.code(401).send({ reason: 'InvalidToken', message: 'no' }),
    );
    await app.ready();
    try {
      const statuses: number[] = [];
      for (let i = 1; i <= 30; i++) {
        const r = await app.inject({
          method: 'GET',
          url: '/guarded',
          remoteAddress: `2001:db8:1:2::${i.toString(16)}`,
        });
        statuses.push(r.statusCode);
      }
      assert.equal(statuses.filter((s) => s === 401).length, 20, `statuses: ${statuses.join(',')}`);
      assert.ok(
        statuses.slice(20).every((s) => s === 429),
        `statuses: ${statuses.join(',')}`,
      );
      const other = await app.inject({ method: 'GET', url: '/guarded', remoteAddress: '2001:db8:1:3::1' });
      assert.equal(other.statusCode, 401, 'another /64 has its own budget');
    } finally {
      await app.close();
    }
  });

  it('N16: the bucket of an address', () => {
    assert.equal(addressBucket('10.0.0.5'), '10.0.0.5');
    assert.equal(addressBucket('::ffff:10.0.0.5'), '10.0.0.5');
    assert.equal(addressBucket('2001:db8:1:2::abcd'), '2001:db8:1:2::/64');
    assert.equal(addressBucket('2001:0db8:0001:0002:1:2:3:4'), '2001:db8:1:2::/64');
    assert.equal(addressBucket('fe80::1%eth0'), 'fe80:0:0:0::/64');
    assert.equal(addressBucket('::1'), '0:0:0:0::/64');
    assert.equal(addressBucket(undefined), 'unknown');
  });
});
