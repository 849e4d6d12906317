/**
 * The Helm chart (charts/metal-operator) as its users run it: {@link helmBinary} builds or reuses
 * the pinned helm CLI (hack/build-helm.sh, helm.sh/helm/v3 from its Go module), {@link helmSetArgs}
 * turns values into `--set` flags, {@link helmTemplate} renders offline (no API server), and
 * {@link helmInstallArgs} is the `helm install` command line the in-cluster test runs, e.g.
 *   execFileSync(helmBinary(), helmInstallArgs({ 'bootNetwork.registryUrl': 'http://192.0.2.1:30100', ... }))
 * Every function throws (with helm's stderr) when helm exits non-zero.
 */
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';

export const CHART = join(process.cwd(), 'charts', 'metal-operator');
/** The release name and namespace the chart's default comparison assumes (config/'s namespace). */
export const RELEASE = 'metal-operator';
export const NAMESPACE = 'metal-system';

let cached: string | undefined;

/** Path of the pinned helm binary; builds it on first use (minutes; cached in ~/.cache/metal-operator-ts/bin). */
export function helmBinary(): string {
  cached ??= execFileSync('bash', [join(process.cwd(), 'hack', 'build-helm.sh')], {
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'inherit'],
  }).trim();
  return cached;
}

/** Runs helm with `args`; returns stdout. Throws an Error carrying helm's stderr on a non-zero exit. */
export function helm(args: string[]): string {
  try {
    return execFileSync(helmBinary(), args, {
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'pipe'],
      maxBuffer: 64 << 20,
    });
  } catch (err) {
    const e = err as { stderr?: string; message: string };
    throw new Error(`helm ${args.join(' ')}: ${e.stderr || e.message}`);
  }
}

/**
 * `--set key=value` per entry. Helm's --set splits on commas and reads `\,` as a literal comma
 * (allowedRegistries is comma-separated), so commas and backslashes are escaped; numbers and
 * true/false become typed values as with a hand-written --set.
 */
export function helmSetArgs(values: Record<string, string>): string[] {
  return Object.entries(values).flatMap(([k, v]) => [
    '--set',
    `${k}=${v.replace(/[\\,]/g, (c) => `\\${c}`)}`,
  ]);
}

/** `helm template` of the chart as release {@link RELEASE} in `namespace`; returns the rendered YAML stream. */
export function helmTemplate(values: Record<string, string> = {}, namespace = NAMESPACE): string {
  return helm(['template', RELEASE, CHART, '--namespace', namespace, ...helmSetArgs(values)]);
}

/**
 * The arguments of `helm install` (after the binary) that install the chart into `namespace`
 * (created if missing) and wait until its Deployments are available:
 *   helm install metal-operator charts/metal-operator --namespace metal-system --create-namespace
 *     --wait --timeout <timeout> --set k=v ...
 * `values` needs at least bootNetwork.registryUrl and bootNetwork.bootserverUrl (the manager refuses
 * to start without them) and, to discover Servers, bootNetwork.probeImage.
 */
export function helmInstallArgs(
  values: Record<string, string>,
  opts: { namespace?: string; timeout?: string; kubeconfig?: string } = {},
): string[] {
  return [
    'install',
    RELEASE,
    CHART,
    '--namespace',
    opts.namespace ?? NAMESPACE,
    '--create-namespace',
    '--wait',
    '--timeout',
    opts.timeout ?? '5m',
    ...(opts.kubeconfig ? ['--kubeconfig', opts.kubeconfig] : []),
    ...helmSetArgs(values),
  ];
}

/** ConfigMap metal-boot-network's keys (config/manager/manager.yaml) -> the chart's values. */
const BOOT_NETWORK_VALUES: Record<string, string> = {
  'registry-url': 'bootNetwork.registryUrl',
  'bootserver-url': 'bootNetwork.bootserverUrl',
  'probe-image': 'bootNetwork.probeImage',
  'allowed-registries': 'bootNetwork.allowedRegistries',
  'insecure-registries': 'bootNetwork.insecureRegistries',
};

/**
 * The values that make the chart deploy what a kustomize overlay of config/<layout> deploys when it
 * sets only the image (`name:tag`) and ConfigMap metal-boot-network's `data` (keys as in that
 * ConfigMap). Throws on a data key the ConfigMap does not have.
 */
export function helmValuesFor(
  image: string,
  bootNetwork: Record<string, string>,
  layout: 'default' | 'signals' = 'default',
): Record<string, string> {
  const i = image.lastIndexOf(':');
  const values: Record<string, string> = {
    'image.repository': image.slice(0, i),
    'image.tag': image.slice(i + 1),
    'signals.enabled': String(layout === 'signals'),
  };
  for (const [k, v] of Object.entries(bootNetwork)) {
    const key = BOOT_NETWORK_VALUES[k];
    if (!key) throw new Error(`ConfigMap metal-boot-network has no key ${k}`);
    values[key] = v;
  }
  return values;
}
