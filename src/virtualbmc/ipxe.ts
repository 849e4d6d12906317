/**
 * What a simulated host's firmware and initramfs read from an iPXE script: the kernel line and the
 * kernel command-line keys the project's boot server renders.
 *
 * Kernel command-line keys relied on (all optional, unknown keys are ignored):
 * - `metal.mode=probe|os` — `probe`: the discovery image, which registers hardware (`POST /register`);
 *   `os`: an installed/provisioned OS, which reports `POST /bootstate`. When absent: `os` if a token is
 *   present, else `probe`.
 * - `metal.registry=<url>` — base URL of the registry that receives the callback.
 * - `metal.token=<token>` — the attempt's callback token (sent as `Authorization: Bearer <token>`).
 *   When absent, the `token` query parameter of `ignition.config.url` is used.
 * - `metal.uuid=<uuid>` — the system UUID to report; when absent the host's own (lower case, as Linux
 *   `/sys/class/dmi/id/product_uuid` reports it).
 * - `ignition.config.url=<url>` — fetched once before the callback (as Ignition does in the initramfs).
 * - `metal.callback=skip` — boot (fetch ignition) but never post the callback.
 *
 * These are the keys and defaults of the project's VM image agent (`hack/vm/init`) too.
 *
 * Tolerated script variations: `#!ipxe` header or not, comments (`#`), CRLF line ends, `:label` lines,
 * `kernel`/`chain`/`imgexec` with options such as `--name x` or `--autofree` before the URL, values in
 * single or double quotes, and `${var}` left unexpanded (such arguments are kept verbatim). A script
 * without a kernel line (e.g. `exit`, `sanboot`) means "boot from local disk".
 */

export interface KernelCommandLine {
  /** Every `key=value` argument (last one wins); flags without `=` map to `''`. */
  params: Map<string, string>;
  mode: 'probe' | 'os';
  registry: string | undefined;
  token: string | undefined;
  uuid: string | undefined;
  ignitionUrl: string | undefined;
  /** `metal.callback=skip`. */
  skipCallback: boolean;
}

export interface IpxeScript {
  /** URL of the kernel, or `undefined` when the script boots from local disk. */
  kernelUrl: string | undefined;
  initrdUrls: string[];
  cmdline: KernelCommandLine | undefined;
}

const KERNEL_COMMANDS = new Set(['kernel', 'chain', 'imgexec', 'boot']);
const INITRD_COMMANDS = new Set(['initrd', 'imgfetch', 'module']);

/** Parses an iPXE script. Never throws: an unusable script is a local boot. */
export function parseIpxeScript(script: string): IpxeScript {
  const result: IpxeScript = { kernelUrl: undefined, initrdUrls: [], cmdline: undefined };
  for (const raw of script.split(/\r?\n/)) {
    const line = raw.trim();
    if (line === '' || line.startsWith('#') || line.startsWith(':')) continue;
    const words = splitWords(line);
    const command = words[0]?.toLowerCase();
    if (command === undefined) continue;
    const args = dropOptions(words.slice(1));
    if (
      KERNEL_COMMANDS.has(command) &&
      result.kernelUrl === undefined &&
      args[0] !== undefined &&
      looksLikeUrl(args[0])
    ) {
      result.kernelUrl = args[0];
      result.cmdline = parseKernelCommandLine(args.slice(1));
    } else if (INITRD_COMMANDS.has(command) && args[0] !== undefined) {
      result.initrdUrls.push(args[0]);
    }
  }
  return result;
}

/** Interprets kernel arguments (already split into words). */
export function parseKernelCommandLine(args: string[]): KernelCommandLine {
  const params = new Map<string, string>();
  for (const arg of args) {
    const eq = arg.indexOf('=');
    if (eq < 0) params.set(arg, '');
    else params.set(arg.slice(0, eq), unquote(arg.slice(eq + 1)));
  }
  const ignitionUrl = nonEmpty(params.get('ignition.config.url'));
  let token = nonEmpty(params.get('metal.token'));
  if (token === undefined && ignitionUrl !== undefined) {
    try {
      token = nonEmpty(new URL(ignitionUrl).searchParams.get('token') ?? undefined);
    } catch {
      token = undefined;
    }
  }
  const rawMode = params.get('metal.mode')?.toLowerCase();
  const mode = rawMode === 'probe' || rawMode === 'os' ? rawMode : token !== undefined ? 'os' : 'probe';
  return {
    params,
    mode,
    registry: nonEmpty(params.get('metal.registry')),
    token,
    uuid: nonEmpty(params.get('metal.uuid')),
    ignitionUrl,
    skipCallback: params.get('metal.callback') === 'skip',
  };
}

/** Splits on whitespace, keeping quoted runs together (quotes removed). */
function splitWords(line: string): string[] {
  const words: string[] = [];
  let current = '';
  let quote: string | undefined;
  let inWord = false;
  for (const ch of line) {
    if (quote !== undefined) {
      if (ch === quote) quote = undefined;
      else current += ch;
    } else if (ch === '"' || ch === "'") {
      quote = ch;
      inWord = true;
    } else if (/\s/.test(ch)) {
      if (inWord) words.push(current);
      current = '';
      inWord = false;
    } else {
      current += ch;
      inWord = true;
    }
  }
  if (inWord) words.push(current);
  return words;
}

/** Drops iPXE image options (`--name x`, `-n x`, `--autofree`, `--name=x`) before the image URL. */
function dropOptions(args: string[]): string[] {
  let i = 0;
  while (i < args.length && args[i]!.startsWith('-')) {
    const opt = args[i]!;
    const takesValue = /^(--name|-n|--timeout|-t)$/.test(opt);
    i += takesValue ? 2 : 1;
  }
  return args.slice(i);
}

function looksLikeUrl(s: string): boolean {
  return /^[a-z][a-z0-9+.-]*:\/\//i.test(s) || s.startsWith('/') || s.includes('${');
}

function unquote(s: string): string {
  return s.length >= 2 && (s[0] === '"' || s[0] === "'") && s.endsWith(s[0]!) ? s.slice(1, -1) : s;
}

function nonEmpty(s: string | undefined): string | undefined {
  return s === undefined || s === '' ? undefined : s;
}
