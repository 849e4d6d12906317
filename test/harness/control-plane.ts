/** The test control plane lives in `src/localstack/` because `local up` uses it too. */
export * from '../../src/localstack/control-plane.js';
