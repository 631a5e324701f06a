// Request schemas for OpenAI-shaped endpoints. Unknown top-level parameters are accepted and ignored, as OpenAI's
// SDKs add new ones often; the ones we honour are typed strictly so a wrong type is a 400, never a guess.

const stringOrParts = {
  anyOf: [
    { type: 'string' },
    {
      type: 'array',
      items: {
        type: 'object',
        required: ['type'],
        properties: { type: { type: 'string' }, text: { type: 'string' } },
      },
    },
    { type: 'null' },
  ],
} as const;

/** Up to four stop sequences (OpenAI's limit), as one string or a list. */
const stopSequences = {
  anyOf: [{ type: 'string', minLength: 1 }, { type: 'array', maxItems: 4, items: { type: 'string', minLength: 1 } }, { type: 'null' }],
} as const;

const streamOptions = {
  anyOf: [{ type: 'object', properties: { include_usage: { type: 'boolean' } } }, { type: 'null' }],
} as const;

export const chatCompletionBody = {
  type: 'object',
  required: ['model', 'messages'],
  properties: {
    model: { type: 'string', minLength: 1, maxLength: 256 },
    messages: {
      type: 'array',
      minItems: 1,
      maxItems: 4096,
      items: {
        type: 'object',
        required: ['role'],
        properties: {
          role: { enum: ['system', 'developer', 'user', 'assistant', 'tool'] },
          content: stringOrParts,
          name: { type: 'string', maxLength: 256 },
          tool_call_id: { type: 'string' },
          tool_calls: {
            type: 'array',
            items: {
              type: 'object',
              required: ['id', 'type', 'function'],
              properties: {
                id: { type: 'string' },
                type: { const: 'function' },
                function: {
                  type: 'object',
                  required: ['name', 'arguments'],
                  properties: { name: { type: 'string' }, arguments: { type: 'string' } },
                },
              },
            },
          },
        },
      },
    },
    temperature: { type: 'number', minimum: 0, maximum: 2 },
    top_p: { type: 'number', minimum: 0, maximum: 1 },
    max_tokens: { type: 'integer', minimum: 1 },
    max_completion_tokens: { type: 'integer', minimum: 1 },
    stop: stopSequences,
    seed: { type: 'integer' },
    n: { type: 'integer', minimum: 1, maximum: 1 },
    stream: { type: 'boolean' },
    stream_options: streamOptions,
    presence_penalty: { type: 'number', minimum: -2, maximum: 2 },
    frequency_penalty: { type: 'number', minimum: -2, maximum: 2 },
    response_format: {
      type: 'object',
      required: ['type'],
      properties: {
        type: { enum: ['text', 'json_object', 'json_schema'] },
        json_schema: {
          type: 'object',
          required: ['name'],
          properties: { name: { type: 'string' }, schema: { type: 'object' }, strict: { type: ['boolean', 'null'] } },
        },
      },
    },
    tools: {
      type: 'array',
      maxItems: 128,
      items: {
        type: 'object',
        required: ['type', 'function'],
        properties: {
          type: { const: 'function' },
          function: {
            type: 'object',
            required: ['name'],
            properties: {
              name: { type: 'string', pattern: '^[A-Za-z0-9_-]{1,64}$' },
              description: { type: 'string' },
              parameters: { type: 'object' },
              strict: { type: ['boolean', 'null'] },
            },
          },
        },
      },
    },
    tool_choice: {
      anyOf: [
        { enum: ['none', 'auto', 'required'] },
        { type: 'object', required: ['type', 'function'], properties: { function: { type: 'object', required: ['name'] } } },
      ],
    },
    logprobs: { type: ['boolean', 'null'] },
    service_tier: { enum: ['auto', 'default', 'flex', 'priority', null] },
    top_logprobs: { type: ['integer', 'null'], minimum: 0, maximum: 20 },
    user: { type: 'string' },
  },
} as const;

export const completionBody = {
  type: 'object',
  required: ['model', 'prompt'],
  properties: {
    model: { type: 'string', minLength: 1, maxLength: 256 },
    prompt: {
      anyOf: [
        { type: 'string' },
        { type: 'array', minItems: 1, maxItems: 16, items: { type: 'string' } },
        // Tokens: typed here so that the route can refuse them with a message of its own.
        { type: 'array', minItems: 1, items: { type: 'integer' } },
        { type: 'array', minItems: 1, items: { type: 'array', items: { type: 'integer' } } },
      ],
    },
    suffix: { type: ['string', 'null'] },
    max_tokens: { type: ['integer', 'null'], minimum: 1 },
    temperature: { type: ['number', 'null'], minimum: 0, maximum: 2 },
    top_p: { type: ['number', 'null'], minimum: 0, maximum: 1 },
    n: { type: ['integer', 'null'], minimum: 1, maximum: 1 },
    best_of: { type: ['integer', 'null'], minimum: 1, maximum: 1 },
    stream: { type: ['boolean', 'null'] },
    stream_options: streamOptions,
    stop: stopSequences,
    seed: { type: ['integer', 'null'] },
    echo: { type: ['boolean', 'null'] },
    service_tier: { enum: ['auto', 'default', 'flex', 'priority', null] },
    logprobs: { type: ['integer', 'null'], minimum: 0, maximum: 5 },
    presence_penalty: { type: ['number', 'null'], minimum: -2, maximum: 2 },
    frequency_penalty: { type: ['number', 'null'], minimum: -2, maximum: 2 },
    user: { type: 'string' },
  },
} as const;

const nullable = (schema: Record<string, unknown>) => ({ anyOf: [schema, { type: 'null' }] });

/**
 * The Responses API. Input items and tools are typed loosely here: the route refuses what it does not serve by name
 * (responses-input.ts), with a message that says what to send instead.
 */
export const responsesBody = {
  type: 'object',
  required: ['model'],
  properties: {
    model: { type: 'string', minLength: 1, maxLength: 256 },
    input: {
      anyOf: [
        { type: 'string' },
        {
          type: 'array',
          maxItems: 4096,
          items: {
            type: 'object',
            properties: {
              type: { type: 'string' },
              role: { type: 'string' },
              content: {
                anyOf: [
                  { type: 'string' },
                  { type: 'array', items: { type: 'object', required: ['type'], properties: { type: { type: 'string' } } } },
                ],
              },
              call_id: { type: 'string' },
              name: { type: 'string' },
              arguments: { type: 'string' },
              output: { anyOf: [{ type: 'string' }, { type: 'array', items: { type: 'object' } }] },
              id: { type: 'string' },
            },
          },
        },
      ],
    },
    instructions: nullable({ type: 'string' }),
    tools: nullable({
      type: 'array',
      maxItems: 128,
      items: {
        type: 'object',
        required: ['type'],
        properties: {
          type: { type: 'string' },
          name: { type: 'string' },
          description: nullable({ type: 'string' }),
          parameters: nullable({ type: 'object' }),
          strict: { type: ['boolean', 'null'] },
        },
      },
    }),
    tool_choice: {
      anyOf: [
        { enum: ['none', 'auto', 'required'] },
        { type: 'object', required: ['type'], properties: { type: { type: 'string' }, name: { type: 'string' } } },
        { type: 'null' },
      ],
    },
    text: nullable({
      type: 'object',
      properties: {
        format: nullable({
          type: 'object',
          required: ['type'],
          properties: {
            type: { enum: ['text', 'json_object', 'json_schema'] },
            name: { type: 'string' },
            schema: { type: 'object' },
            strict: { type: ['boolean', 'null'] },
            description: { type: 'string' },
          },
        }),
        verbosity: { type: ['string', 'null'] },
      },
    }),
    temperature: { type: ['number', 'null'], minimum: 0, maximum: 2 },
    top_p: { type: ['number', 'null'], minimum: 0, maximum: 1 },
    max_output_tokens: { type: ['integer', 'null'], minimum: 1 },
    stream: { type: ['boolean', 'null'] },
    store: { type: ['boolean', 'null'] },
    previous_response_id: { type: ['string', 'null'], maxLength: 128 },
    metadata: nullable({ type: 'object', maxProperties: 16, additionalProperties: { type: 'string', maxLength: 512 } }),
    parallel_tool_calls: { type: ['boolean', 'null'] },
    truncation: { enum: ['auto', 'disabled', null] },
    include: nullable({ type: 'array', items: { type: 'string' } }),
    reasoning: nullable({ type: 'object' }),
    background: { type: ['boolean', 'null'] },
    service_tier: { enum: ['auto', 'default', 'flex', 'priority', null] },
    top_logprobs: { type: ['integer', 'null'], minimum: 0, maximum: 20 },
    user: { type: 'string' },
  },
} as const;

export const embeddingsBody = {
  type: 'object',
  required: ['model', 'input'],
  properties: {
    model: { type: 'string', minLength: 1, maxLength: 256 },
    input: {
      anyOf: [
        { type: 'string' },
        { type: 'array', minItems: 1, maxItems: 2048, items: { type: 'string' } },
        { type: 'array', minItems: 1, maxItems: 2048, items: { type: 'integer', minimum: 0 } },
        {
          type: 'array',
          minItems: 1,
          maxItems: 2048,
          items: { type: 'array', minItems: 1, items: { type: 'integer', minimum: 0 } },
        },
      ],
    },
    encoding_format: { enum: ['float', 'base64'] },
    service_tier: { enum: ['auto', 'default', 'flex', 'priority', null] },
    dimensions: { type: 'integer', minimum: 1 },
    user: { type: 'string' },
  },
} as const;

export const imageGenerationBody = {
  type: 'object',
  required: ['prompt'],
  properties: {
    prompt: { type: 'string', minLength: 1, maxLength: 32_000 },
    model: { type: 'string', minLength: 1, maxLength: 256 },
    n: { type: 'integer', minimum: 1, maximum: 10 },
    size: { type: 'string', pattern: '^(auto|[1-9][0-9]{1,3}x[1-9][0-9]{1,3})$' },
    response_format: { enum: ['url', 'b64_json'] },
    output_format: { enum: ['png', 'jpeg', 'webp'] },
    output_compression: { type: 'integer', minimum: 0, maximum: 100 },
    quality: { enum: ['standard', 'hd', 'low', 'medium', 'high', 'auto'] },
    style: { enum: ['vivid', 'natural'] },
    background: { enum: ['transparent', 'opaque', 'auto'] },
    moderation: { enum: ['low', 'auto'] },
    user: { type: 'string' },
  },
} as const;
