/**
 * The shape of a local stack — back end, number of servers, VM firmware, network, boot method and
 * virtual BMC profile — as `local up` asked for it and as the daemon resolved it, and the rule by
 * which a later `local up` may reuse a running stack: only when every asked-for property is what the
 * stack has. `auto` (network, boot method) accepts what `auto` chooses on this machine; the running
 * stack shows what that is. Pure.
 */

/** What `local up` asks for; undefined is the flag's default (firmware `uefi`, `auto`, no profile). */
export interface RequestedShape {
  backend: string;
  servers: number;
  firmware?: string;
  network?: string;
  bootMethod?: string;
  bmcProfile?: string;
}

/** A running stack's shape: as asked (defaults applied) and as resolved. Stored in the local state. */
export interface StackShape {
  firmware: string;
  /** `user` | `bridge` | `auto` as asked, and `user` | `bridge` as made. */
  network: { requested: string; resolved: string };
  /** `pxe` | `http` | `auto` as asked, and `pxe` | `http` as chosen. */
  bootMethod: { requested: string; resolved: string };
  /** Vendor profile of the virtual BMC, `none` without one. */
  bmcProfile: string;
}

/**
 * Why a stack of `running` (with `backend` and `servers`) cannot serve `asked`: one sentence per
 * differing property, naming the flag, what the running stack has and what was asked. Empty when
 * it can be reused. Firmware, network and boot method only matter for the QEMU back end.
 */
export function shapeDifferences(
  running: { backend: string; servers: number; shape?: StackShape },
  asked: RequestedShape,
): string[] {
  const out: string[] = [];
  const differ = (flag: string, has: string, wants: string) =>
    out.push(`${flag}: the running stack has ${has}, this command asks for ${wants}`);
  if (running.backend !== asked.backend) differ('--backend', running.backend, asked.backend);
  if (running.servers !== asked.servers) differ('--servers', String(running.servers), String(asked.servers));
  const shape = running.shape;
  // A stack recorded before shapes were stored: nothing to compare against but back end and size.
  if (!shape) return out;
  const profile = asked.bmcProfile ?? 'none';
  if (shape.bmcProfile !== profile) differ('--bmc-profile', shape.bmcProfile, profile);
  if (asked.backend !== 'qemu' || running.backend !== 'qemu') return out;
  const firmware = asked.firmware ?? 'uefi';
  if (shape.firmware !== firmware) differ('--firmware', shape.firmware, firmware);
  const network = asked.network ?? 'auto';
  // `auto` is bridge where namespaces can be made: a bridged stack proves they can; a user-mode
  // one started with `auto` proves they cannot.
  const networkOk =
    network === 'auto'
      ? shape.network.resolved === 'bridge' || shape.network.requested === 'auto'
      : network === shape.network.resolved;
  if (!networkOk) differ('--network', describe(shape.network), network);
  const bootMethod = asked.bootMethod ?? 'auto';
  // `auto` is HTTP boot where the network is bridged and every VM is UEFI.
  const autoChoice = shape.network.resolved === 'bridge' && firmware === 'uefi' ? 'http' : 'pxe';
  const bootOk =
    bootMethod === 'auto'
      ? shape.bootMethod.resolved === autoChoice
      : bootMethod === shape.bootMethod.resolved;
  if (!bootOk)
    differ(
      '--boot-method',
      describe(shape.bootMethod),
      bootMethod === 'auto' ? `auto (${autoChoice} here)` : bootMethod,
    );
  return out;
}

function describe(p: { requested: string; resolved: string }): string {
  return p.requested === p.resolved ? p.resolved : `${p.resolved} (asked: ${p.requested})`;
}
