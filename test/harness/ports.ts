/**
 * Loopback ports for test servers that must keep their port across a restart or that are bound some
 * time after being picked: drawn from below the kernel's ephemeral range (src/localstack/ports.ts).
 */
export { freePorts as stablePorts } from '../../src/localstack/ports.js';
