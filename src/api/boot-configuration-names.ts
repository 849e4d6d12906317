/**
 * Names of the boot configurations the manager makes for a Server itself (not for a claim), defined
 * once for the controllers that create them and the boot server that must tell them apart.
 */

/** Name of a Server's discovery ServerBootConfiguration (in the manager's namespace), ≤ 240 characters. */
export function discoveryBootConfigurationName(server: string): string {
  return `discovery-${server}`.slice(0, 240);
}

/**
 * True for the discovery boot configuration of a Server: owned by that Server and named by
 * {@link discoveryBootConfigurationName}. Its image boots as the probe (`metal.mode=probe`).
 */
export function isDiscoveryBootConfiguration(sbc: {
  metadata: { name?: string; ownerReferences?: { kind: string; name: string }[] };
}): boolean {
  return (sbc.metadata.ownerReferences ?? []).some(
    (o) => o.kind === 'Server' && sbc.metadata.name === discoveryBootConfigurationName(o.name),
  );
}
