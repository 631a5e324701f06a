// A client's JSON schema as a grammar llama.cpp samples under. node-llama-cpp compiles a subset of JSON Schema to
// GBNF; two things in what it makes would let a model write JSON that no client can accept, and its subset leaves out
// keywords that clients' schema generators (zod, pydantic) emit. So:
// - the schema is first put into that subset where the meaning is the same (`anyOf` as `oneOf`, `definitions` as
//   `$defs`, a lone `allOf`, `true` and `{}` as any value); what cannot be is refused with the keyword's place;
// - in its GBNF, an `integer` takes no exponent and at most 15 digits (a safe integer: `325E2559` is Infinity, and 17
//   digits are not the number written), and a `number`'s exponent has at most two digits (never Infinity).
// Keywords the grammar does not enforce (minimum, pattern, multipleOf…) are not refused: a strict call's answer is
// validated against the client's own schema afterwards (http/answer-schema.ts), and refused if it does not match.
import { LlamaText, type GbnfJsonSchema, type Llama, type LlamaGrammar } from 'node-llama-cpp';
import { ApiError } from '../../errors/index.js';

/** What node-llama-cpp's generator knows as "any JSON value". */
const ANY: Record<string, unknown> = {
  oneOf: [{ type: ['string', 'number', 'boolean', 'null'] }, { type: 'object', additionalProperties: true }, { type: 'array' }],
};

/** Keywords whose schemas are schemas too: each is translated in turn. */
const SCHEMA_MAPS = ['properties', '$defs', 'definitions'] as const;
const SCHEMA_LISTS = ['oneOf', 'anyOf', 'prefixItems'] as const;

/** Refused: the grammar would allow answers that never match them, or none that do. */
const UNSUPPORTED = ['not', 'if', 'then', 'else', 'dependentSchemas', 'dependentRequired', 'unevaluatedProperties', 'contains'];

function refuse(param: string, why: string): never {
  throw new ApiError('invalid_request_error', `The JSON schema in '${param}' cannot be enforced: ${why}. Use a simpler schema.`, {
    param,
  });
}

function translate(schema: unknown, param: string, at: string, defs: ReadonlySet<string>): unknown {
  if (schema === true) return ANY;
  if (schema === false) refuse(param, `${at} is false (no value matches it)`);
  if (schema === null || typeof schema !== 'object' || Array.isArray(schema)) refuse(param, `${at} is not a schema`);
  const source = schema as Record<string, unknown>;
  for (const keyword of UNSUPPORTED) if (keyword in source) refuse(param, `'${keyword}' (at ${at}) is not supported`);
  if (Object.keys(source).every((k) => k === 'description' || k === 'title' || k === '$schema')) return ANY;

  const out: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(source)) {
    if (key === 'allOf') continue;
    if ((SCHEMA_MAPS as readonly string[]).includes(key) && value && typeof value === 'object') {
      const target = key === 'definitions' ? '$defs' : key;
      out[target] = Object.fromEntries(
        Object.entries(value as Record<string, unknown>).map(([name, sub]) => [name, translate(sub, param, `${at}.${key}.${name}`, defs)]),
      );
    } else if ((SCHEMA_LISTS as readonly string[]).includes(key) && Array.isArray(value)) {
      out[key === 'anyOf' ? 'oneOf' : key] = value.map((sub, i) => translate(sub, param, `${at}.${key}[${i}]`, defs));
    } else if (key === 'items' || key === 'additionalProperties') {
      out[key] = typeof value === 'boolean' ? value : translate(value, param, `${at}.${key}`, defs);
    } else if (key === '$ref') {
      if (typeof value !== 'string') refuse(param, `${at}.$ref is not a string`);
      const local = /^#\/(?:\$defs|definitions)\/([^/]+)$/.exec(value);
      if (!local) refuse(param, `'$ref' '${value}' (at ${at}) is not a reference to '#/$defs/NAME'`);
      if (!defs.has(local[1]!)) refuse(param, `'$ref' '${value}' (at ${at}) names a definition the schema does not have`);
      out.$ref = `#/$defs/${local[1]}`;
    } else {
      out[key] = value;
    }
  }
  // A schema with properties or items but no type is an object's or an array's (node-llama-cpp needs the type).
  if (out.type === undefined && out.properties !== undefined) out.type = 'object';
  if (out.type === undefined && (out.items !== undefined || out.prefixItems !== undefined)) out.type = 'array';
  const allOf = source.allOf;
  if (allOf !== undefined) {
    if (!Array.isArray(allOf) || allOf.length !== 1) refuse(param, `'allOf' (at ${at}) with more than one schema is not supported`);
    // A lone allOf (zod and pydantic wrap a reference with a description so) is the schema it holds.
    return { ...out, ...(translate(allOf[0], param, `${at}.allOf[0]`, defs) as Record<string, unknown>) };
  }
  return out;
}

/** The schema in the subset node-llama-cpp compiles; refuses (400, naming `param`) what it cannot express. */
export function grammarSchema(schema: unknown, param: string): GbnfJsonSchema {
  // What a local $ref may name: the root's definitions (node-llama-cpp reads any other as "any value").
  const defs = new Set<string>();
  if (schema && typeof schema === 'object') {
    for (const key of ['$defs', 'definitions']) {
      const found = (schema as Record<string, unknown>)[key];
      if (found && typeof found === 'object') for (const name of Object.keys(found)) defs.add(name);
    }
  }
  return translate(schema, param, 'the root', defs) as GbnfJsonSchema;
}

const INTEGER_RULE = /^integer-number-rule ::= .*$/m;
const FRACTIONAL_RULE = /^fractional-number-rule ::= .*$/m;

/** The GBNF with numbers that JSON.parse reads as the number written: integers safe, exponents short. */
export function finiteNumbers(gbnf: string): string {
  return gbnf
    .replace(INTEGER_RULE, 'integer-number-rule ::= "-"? ("0" | [1-9] [0-9]{0,14})')
    .replace(FRACTIONAL_RULE, 'fractional-number-rule ::= "-"? ("0" | [1-9] [0-9]{0,14}) ("." [0-9]{1,16})? ([eE] [-+]? [1-9] [0-9]?)?');
}

/**
 * The grammar for answers matching `schema`: node-llama-cpp's, with finite numbers. It ends an answer as
 * node-llama-cpp's own JSON-schema grammar does (four newlines stop generation; trailing whitespace is trimmed).
 */
export async function jsonSchemaGrammar(llama: Llama, schema: unknown, param: string): Promise<LlamaGrammar> {
  const base = await llama.createGrammarForJsonSchema(grammarSchema(schema, param) as Parameters<Llama['createGrammarForJsonSchema']>[0]);
  return llama.createGrammar({
    grammar: finiteNumbers(base.grammar),
    stopGenerationTriggers: [LlamaText(['\n'.repeat(4)])],
    trimWhitespaceSuffix: true,
  });
}
