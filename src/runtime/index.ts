/** The controller runtime's public surface (each module can also be imported on its own). */
export * from './backoff.js';
export * from './client.js';
export * from './conditions.js';
export * from './controller.js';
export * from './events.js';
export * from './finalizers.js';
export * from './health.js';
export * from './informer.js';
export * from './leader.js';
export * from './logger.js';
export * from './manager.js';
export * from './metrics.js';
export * from './ownerrefs.js';
export * from './queue.js';
export * from './resource.js';
export * from './time.js';
