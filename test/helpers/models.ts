// Watching a running daemon's models from outside, as a client sees them: what /v1/models lists, what health says of
// every model, and waiting until one of those holds.
import OpenAI from 'openai';

export interface ModelsHealth {
  models: Array<{ id: string; readiness: string }>;
  unavailable_models: Array<{ id: string; state: string; reason: string }>;
}

export function modelsProbe(baseURL: string, secret: string) {
  const client = new OpenAI({ apiKey: secret, baseURL, maxRetries: 0 });
  const health = async () =>
    (await (await fetch(`${baseURL}/health`, { headers: { authorization: `Bearer ${secret}` } })).json()) as ModelsHealth;
  return {
    client,
    health,
    /** The ids /v1/models lists, sorted. */
    listed: async () => (await client.models.list()).data.map((m) => m.id).sort(),
    /** Polls `probe` until it gives a value; past `ms`, fails with what health says. */
    until: async <T>(what: string, ms: number, probe: () => Promise<T | undefined>): Promise<T> => {
      const end = Date.now() + ms;
      for (;;) {
        const value = await probe();
        if (value !== undefined) return value;
        if (Date.now() > end) throw new Error(`not within ${ms} ms: ${what}; health: ${JSON.stringify(await health().catch(() => null))}`);
        await new Promise((r) => setTimeout(r, 200));
      }
    },
  };
}
