// Responses made with `store: true` (/v1/responses), kept for previous_response_id, item_reference and GET: the
// response as it was answered, the input items it was given, and each item under its own id. What is kept is what the
// model saw and said after scrubbing: no raw personal data reaches the disk. Each belongs to the project that made it
// (another project's is as if absent) and is deleted once `ttlMs` has passed since it was made.
import type { Database } from 'lmdb';
import { findFresh, type Store } from '../store/index.js';

/** An input or output item as the API lists it: `id` and `type` always, the rest as OpenAI shapes that type. */
export interface StoredItem {
  id: string;
  type: string;
  [field: string]: unknown;
}

/** A response object as the API answers it (OpenAI's `response`). */
export interface ResponseObject {
  id: string;
  object: 'response';
  created_at: number;
  output: StoredItem[];
  previous_response_id: string | null;
  [field: string]: unknown;
}

interface ResponseRecord {
  project: string;
  expiresAt: number;
  response: ResponseObject;
  /** The ids of its input items, in order. */
  input: string[];
}

interface ItemRecord {
  project: string;
  /** The response it came with: it goes when that response goes. */
  response: string;
  item: StoredItem;
}

/** How deep a previous_response_id chain is followed: far past any conversation, short of a loop. */
const LONGEST_CHAIN = 10_000;
const SWEEP_MS = 60_000;

export class ResponseStore {
  private readonly responses: Database<ResponseRecord, string>;
  private readonly items: Database<ItemRecord, string>;
  /** [expiresAt, id]: the responses in the order they expire. */
  private readonly expiry: Database<true, [number, string]>;
  private readonly timer: NodeJS.Timeout;

  constructor(
    private readonly store: Store,
    private readonly ttlMs: number,
    private readonly now: () => number = Date.now,
  ) {
    this.responses = store.db<ResponseRecord>('responses');
    this.items = store.db<ItemRecord>('response-items');
    this.expiry = store.db<true, [number, string]>('responses-expiry');
    this.timer = setInterval(() => void this.sweep().catch(() => {}), SWEEP_MS).unref();
  }

  /** Keeps `response` and its input items for the project; resolves once on disk. */
  async save(project: string, response: ResponseObject, input: StoredItem[]): Promise<void> {
    const expiresAt = this.now() + this.ttlMs;
    await this.store.update((tx) => {
      tx.put('responses', response.id, { project, expiresAt, response, input: input.map((i) => i.id) });
      for (const item of [...input, ...response.output]) tx.put('response-items', item.id, { project, response: response.id, item });
      tx.put('responses-expiry', [expiresAt, response.id], true);
    });
  }

  /**
   * `find` on this replica's copy, and on a miss once more after catching up (store: postgres), so a response stored
   * through another replica a moment ago is found here.
   */
  fresh<T>(find: (responses: this) => T): Promise<T> {
    return findFresh(this.store, () => find(this));
  }

  /** The project's response by id; null when there is none (or it is another project's, or expired). */
  get(project: string, id: string): ResponseObject | null {
    return this.record(project, id)?.response ?? null;
  }

  /** The input items the response was given, in order; null when there is no such response. */
  inputItems(project: string, id: string): StoredItem[] | null {
    const record = this.record(project, id);
    if (!record) return null;
    return record.input.map((itemId) => this.items.get(itemId)?.item).filter((item): item is StoredItem => item !== undefined);
  }

  /** One of the project's stored items (an input or output of a stored response) by its id. */
  item(project: string, id: string): StoredItem | null {
    const record = this.items.get(id);
    if (!record || record.project !== project || !this.record(project, record.response)) return null;
    return record.item;
  }

  /**
   * The conversation up to and including the response: every earlier response's input and output, oldest first.
   * Null when it, or one it follows, is gone (deleted, expired, or another project's): the conversation is not whole.
   */
  conversation(project: string, id: string): StoredItem[] | null {
    const chain: ResponseRecord[] = [];
    for (let next: string | null = id; next !== null;) {
      const record = this.record(project, next);
      if (!record || chain.length >= LONGEST_CHAIN) return null;
      chain.push(record);
      next = record.response.previous_response_id;
    }
    const items: StoredItem[] = [];
    for (const record of chain.reverse()) {
      for (const itemId of record.input) {
        const item = this.items.get(itemId)?.item;
        if (item) items.push(item);
      }
      items.push(...record.response.output);
    }
    return items;
  }

  /** Deletes the project's response and its items; false when there was none. */
  async delete(project: string, id: string): Promise<boolean> {
    const record = this.record(project, id);
    if (!record) return false;
    await this.remove(id, record);
    return true;
  }

  /** Deletes every response whose time is up; resolves with how many. */
  async sweep(): Promise<number> {
    let removed = 0;
    for (const { key } of this.expiry.getRange({ end: [this.now(), '\uffff'] })) {
      const [, id] = key;
      const record = this.responses.get(id);
      if (record) await this.remove(id, record);
      else await this.store.update((tx) => tx.remove('responses-expiry', key));
      removed++;
    }
    return removed;
  }

  close(): void {
    clearInterval(this.timer);
  }

  private record(project: string, id: string): ResponseRecord | null {
    const record = this.responses.get(id);
    if (!record || record.project !== project || record.expiresAt <= this.now()) return null;
    return record;
  }

  private async remove(id: string, record: ResponseRecord): Promise<void> {
    await this.store.update((tx) => {
      tx.remove('responses', id);
      for (const itemId of [...record.input, ...record.response.output.map((o) => o.id)]) {
        if (tx.get<ItemRecord>('response-items', itemId)?.response === id) tx.remove('response-items', itemId);
      }
      tx.remove('responses-expiry', [record.expiresAt, id]);
    });
  }
}
