/**
 * How a signal server (the registry, the boot server) starts and stops: the one sequence both stand
 * on, so neither can forget a step.
 *
 * {@link openSignalServer} builds, in this order, the Prometheus registry (the caller's, else a
 * private one), the {@link BootTargetResolver} over the caller's caches (its metrics registered
 * first) and the Fastify app of http-app.ts (its request metrics, 401/404 budgets, error shapes).
 * The caller registers its routes on `app`, then {@link listenSignalServer} binds it (default host
 * 127.0.0.1; `https` with `tls`) and returns the {@link RunningServer} whose `close` stops the app
 * (open connections are force-closed), waits for the resolver's pending UUID-alias writes, then
 * runs the caller's own cleanup. Throws what `app.listen` throws (port in use, bad host).
 */
import { Registry } from 'prom-client';
import { BootTargetResolver } from './boot-target.js';
import {
  createHttpApp,
  type HttpApp,
  listen,
  type RunningServer,
  type SignalServerOptions,
} from './http-app.js';

/** What a signal server builds its routes from (see {@link openSignalServer}). */
export interface SignalServerBase {
  metrics: Registry;
  resolver: BootTargetResolver;
  app: HttpApp;
}

/** The metrics registry, resolver and app of a signal server named `name` (`registry`, `bootserver`). */
export function openSignalServer(name: string, opts: SignalServerOptions): SignalServerBase {
  const metrics = opts.metrics ?? new Registry();
  const resolver = new BootTargetResolver(opts, metrics);
  const app = createHttpApp(name, opts.log, metrics, opts);
  return { metrics, resolver, app };
}

/**
 * Binds `base.app` as `opts` say; resolves once it listens. `onClose` runs after the app closed and
 * the resolver's alias writes settled.
 */
export async function listenSignalServer(
  base: SignalServerBase,
  opts: SignalServerOptions,
  onClose: () => void = () => {},
): Promise<RunningServer> {
  const bound = await listen(base.app, opts.host ?? '127.0.0.1', opts.port, !!opts.tls);
  return {
    ...bound,
    close: async () => {
      await base.app.close();
      await base.resolver.aliases.settled();
      onClose();
    },
  };
}
