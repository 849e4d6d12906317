/** The stand-in boot server moved to src/testing/ (bench shares it); tests keep this path. */
export * from '../../src/testing/standin-boot-server.js';
