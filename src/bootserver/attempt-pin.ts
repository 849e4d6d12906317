/**
 * The first-address pin of an attempt's boot file (security review S3, issue 13 item 4): the iPXE
 * script or HTTP-boot UKI of one attempt, and the token in it, goes to one client address only.
 *
 * The pin is the fetch condition itself (`IPXEScriptFetched` / `HTTPBootFileFetched`, message
 * `… served to <address>`) of the current attempt, written by `recordSignal` as a compare-and-swap
 * on the SBC's resourceVersion with {@link notPinnedElsewhere} as its guard: of two concurrent
 * clients exactly one write succeeds, the other re-reads the SBC, finds the pin and gets 403
 * `ScriptPinned`. Callers store the pin before a byte of the file leaves. The pin spans both routes
 * (security review N2): a client pinned by either fetch condition of the attempt excludes every
 * other client from both, so the attempt's token never reaches a second address by the other route.
 */
import type { Logger } from 'pino';
import type { ServerBootConfiguration } from '../api/v1alpha1/serverbootconfiguration.js';
import { BootSignal, currentAttemptCondition } from '../api/vocabulary.js';
import { HttpError } from '../bootsignals/http-error.js';

const CLIENT_IN_MESSAGE = / served to (\S+)$/;

/** The message of a fetch condition that pins `client` (read back by {@link pinnedClient}). */
export function pinMessage(what: string, attempt: number, client: string): string {
  return `${what} for attempt ${attempt} served to ${client}`;
}

/** The fetch conditions that pin an attempt's boot file, one per route. */
const PIN_SIGNALS: readonly string[] = [BootSignal.IPXEScriptFetched, BootSignal.HTTPBootFileFetched];

/** The client the current attempt's file was served to, per the SBC's fetch condition `signal`. */
export function pinnedClient(sbc: ServerBootConfiguration, signal: string): string | undefined {
  const fetched = currentAttemptCondition(sbc, signal);
  return fetched ? CLIENT_IN_MESSAGE.exec(fetched.message)?.[1] : undefined;
}

/**
 * A guard for `recordSignal` (run on every SBC version the pin is decided on): throws 403
 * `ScriptPinned` (logged at warn) when this attempt's file went, by `signal`'s route or the other
 * one, to a client other than `client`.
 */
export function notPinnedElsewhere(
  signal: string,
  client: string,
  log: Logger,
): (sbc: ServerBootConfiguration) => void {
  const signals = [signal, ...PIN_SIGNALS.filter((s) => s !== signal)];
  return (sbc) => {
    const pinnedTo = signals.map((s) => pinnedClient(sbc, s)).find((c) => c !== undefined && c !== client);
    if (!pinnedTo) return;
    log.warn(
      { pinnedTo, attempt: sbc.spec.bootAttempt ?? 1 },
      'boot file of this attempt was served to another client; refused',
    );
    throw new HttpError(
      403,
      'ScriptPinned',
      'the boot file of this attempt was already served to another client',
    );
  };
}
