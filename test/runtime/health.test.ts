/** Health server and logger: probe semantics, metrics exposition, credential redaction. No API server. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { startHealthServer } from '../../src/runtime/health.js';
import { RuntimeMetrics } from '../../src/runtime/metrics.js';
import { captureLogger } from './log-capture.js';

describe('health server', () => {
  it('serves /healthz, /readyz (503 until ready) and /metrics', async () => {
    const metrics = new RuntimeMetrics();
    metrics.reconcileTotal.inc({ controller: 'x', result: 'success' });
    let ready = false;
    const srv = await startHealthServer({
      port: 0,
      host: '127.0.0.1',
      registry: metrics.registry,
      ready: () => ready,
    });
    const url = (p: string) => `http://127.0.0.1:${srv.port}${p}`;
    try {
      assert.equal((await fetch(url('/healthz'))).status, 200);
      assert.equal((await fetch(url('/readyz'))).status, 503);
      ready = true;
      assert.equal((await fetch(url('/readyz'))).status, 200);
      const m = await fetch(url('/metrics'));
      assert.equal(m.status, 200);
      assert.match(m.headers.get('content-type') ?? '', /text\/plain/);
      assert.match(await m.text(), /controller_runtime_reconcile_total\{controller="x",result="success"\} 1/);
      assert.equal((await fetch(url('/nope'))).status, 404);
      assert.equal((await fetch(url('/healthz'), { method: 'POST' })).status, 405);
    } finally {
      await srv.close();
    }
  });

  it('shares one registry between several RuntimeMetrics', () => {
    const a = new RuntimeMetrics();
    const b = new RuntimeMetrics(a.registry);
    assert.equal(a.queueDepth, b.queueDepth);
  });
});

describe('logger', () => {
  it('redacts tokens and Authorization headers', () => {
    const { log, records } = captureLogger('redact');
    log.info(
      {
        headers: { authorization: 'Bearer abc123' },
        req: { headers: { authorization: 'Bearer def456', cookie: 'session=1' } },
        token: 'tok789',
        callback: { token: 'cb000', password: 'pw111' },
        server: 'visible',
      },
      'request',
    );
    const line = JSON.stringify(records[0]);
    for (const secret of ['abc123', 'def456', 'session=1', 'tok789', 'cb000', 'pw111']) {
      assert.ok(!line.includes(secret), `${secret} leaked: ${line}`);
    }
    assert.match(line, /visible/);
    assert.equal(records[0]!.name, 'redact');
  });
});
