/**
 * Runs a test body against something that must be stopped afterwards, whatever the body does.
 *
 * Contract: {@link stopAfter} calls `body(resource)`, then `stop()` once on every path. The body's
 * failure is the error it rejects with: a stop that fails after it is passed to `onStopError` (default:
 * logged on stderr) and never replaces it, since the first failure is the one a reader needs. A stop
 * that fails after a body that passed rejects with the stop's error: something that does not stop is
 * a failure of its own (the next test would meet it).
 */

/** Where {@link stopAfter} reports a stop failure it does not throw (the body had failed first). */
export type StopErrorSink = (err: unknown) => void;

const logStopError: StopErrorSink = (err) =>
  console.error('stop failed after the test had failed (the test error is reported):', err);

/** `body(resource)`, then `stop()` on every path; see the module contract for which error wins. */
export async function stopAfter<R, T>(
  resource: R,
  stop: () => Promise<unknown>,
  body: (resource: R) => Promise<T>,
  onStopError: StopErrorSink = logStopError,
): Promise<T> {
  let result: T;
  try {
    result = await body(resource);
  } catch (err) {
    try {
      await stop();
    } catch (stopErr) {
      onStopError(stopErr);
    }
    throw err;
  }
  await stop();
  return result;
}
