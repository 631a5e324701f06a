// A daemon serving the suite's tiny chat and embeddings models (real llama.cpp, random weights), for the tests that run
// the client libraries our users use against it, each on its default path.
import type { Test } from 'tap';
import { makeModelFixtures } from '../fixtures/models.js';
import { createKey, startDaemon, tempDir, waitForModels } from './daemon.js';

export interface ClientDaemon {
  /** Base URL for the OpenAI-compatible clients: `${origin}/v1`. */
  baseURL: string;
  apiKey: string;
}

export async function startClientDaemon(t: Test): Promise<ClientDaemon> {
  const dir = tempDir(t);
  const fixtures = makeModelFixtures(dir);
  const dataDir = `${dir}/data`;
  const key = createKey(dataDir);
  const daemon = await startDaemon(t, ['--data-dir', dataDir, ...fixtures.args]);
  await waitForModels(daemon.baseURL, key.secret, ['tiny-chat', 'tiny-embed']);
  return { baseURL: daemon.baseURL, apiKey: key.secret };
}

/** What the structured-output tests ask for: strings held to enums (a random model writes strings of any length). */
export const PERSON_SCHEMA = {
  type: 'object',
  properties: { name: { enum: ['Huda', 'Omar'] }, age: { type: 'integer' }, score: { type: 'number' } },
  required: ['name', 'age', 'score'],
  additionalProperties: false,
} as const;
