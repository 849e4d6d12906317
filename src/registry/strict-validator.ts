/**
 * The registry's Fastify validator compiler: JSON Schema with strict JSON types. ajv's type
 * coercion would turn `"yes"` into `true`; the wire format is strict JSON types, so a body of the
 * wrong type fails validation (the app answers 400 `InvalidBody`).
 */
import { Ajv } from 'ajv';

const ajv = new Ajv({ coerceTypes: false, allErrors: false, removeAdditional: false, useDefaults: false });

/** Fastify validator compiler with strict JSON types (no coercion of `"yes"` to a boolean). */
export function strictValidator({ schema }: { schema: object }) {
  const validate = ajv.compile(schema);
  return (data: unknown) =>
    validate(data) ? { value: data } : { error: new Error(ajv.errorsText(validate.errors)) };
}
