// A model's slots (daemon/engines/slots.ts), through their interface: acquire with a ticket, release. The fair policy
// against a flooding project, within a project by service tier, flex work in the capacity left, weights, the queue
// bound per project; the fifo policy as the daemon scheduled before.
import t from 'tap';
import { Slots } from '../daemon/engines/slots.js';
import type { CallTicket, ServiceTier } from '../daemon/engines/index.js';

const ticket = (project: string, tier: ServiceTier = 'default', weight = 1): CallTicket => ({ project, weight, tier });
const signal = () => new AbortController().signal;
/** Lets the granted calls' promises settle. */
const settle = () => new Promise((r) => setImmediate(r));

/** A slot's holder, and the order in which calls got theirs. */
function harness(options: ConstructorParameters<typeof Slots>[0]) {
  const slots = new Slots(options);
  const order: string[] = [];
  const releases = new Map<string, () => void>();
  const take = (name: string, t: CallTicket, abort = signal()) => {
    const got = slots.acquire(abort, t).then((release) => {
      order.push(name);
      releases.set(name, release);
    });
    got.catch(() => {});
    return got;
  };
  const release = async (name: string) => {
    releases.get(name)!();
    releases.delete(name);
    await settle();
  };
  return { slots, order, take, release };
}

t.test('fair: a project sending one call at a time is served before a flooding project’s queue', async (t) => {
  const { order, take, release } = harness({ parallel: 2, queue: 32, label: 'm' });
  for (let i = 0; i < 8; i++) void take(`a${i}`, ticket('A'));
  await settle();
  t.same(order, ['a0', 'a1'], 'A alone takes both slots');
  void take('b0', ticket('B'));
  await settle();
  await release('a0');
  t.same(order.slice(2), ['b0'], "the first slot freed goes to B, not to A's queue");
  await release('b0');
  // B has just finished: its slot is kept for its next call while A waits.
  void take('b1', ticket('B'));
  await settle();
  t.same(order.slice(3), ['b1'], 'B’s next call takes the slot kept for it at once');
});

t.test('fair: a slot kept for a project that went quiet is given out once it has been quiet RECENT_MS', async (t) => {
  const { order, take, release } = harness({ parallel: 2, queue: 32, label: 'm', recentMs: 50 });
  void take('b0', ticket('B'));
  for (let i = 0; i < 4; i++) void take(`a${i}`, ticket('A'));
  await settle();
  t.same(order, ['b0', 'a0']);
  await release('b0');
  t.same(order, ['b0', 'a0'], 'kept for B a moment');
  await new Promise((r) => setTimeout(r, 120));
  t.same(order, ['b0', 'a0', 'a1'], 'then A has it');
});

t.test('fair: priority before default within a project; the time a call waited is on its ticket', async (t) => {
  const { order, take, release } = harness({ parallel: 1, queue: 32, label: 'm' });
  void take('d0', ticket('A'));
  await settle();
  void take('d1', ticket('A'));
  const p = ticket('A', 'priority');
  void take('p0', p);
  await settle();
  await new Promise((r) => setTimeout(r, 20));
  await release('d0');
  t.same(order, ['d0', 'p0']);
  t.ok(p.waitedMs! >= 15, `waited ${p.waitedMs} ms`);
});

t.test('fair: flex work runs only in the capacity interactive calls leave, and never on the last slot', async (t) => {
  const { order, take, release } = harness({ parallel: 3, queue: 32, label: 'm' });
  for (let i = 0; i < 4; i++) void take(`f${i}`, ticket('batch', 'flex'));
  await settle();
  t.same(order, ['f0', 'f1'], 'flex takes all the slots but one');
  void take('i0', ticket('B'));
  await settle();
  t.same(order, ['f0', 'f1', 'i0'], 'an interactive call takes the slot flex left');
  void take('i1', ticket('B'));
  await settle();
  await release('f0');
  t.same(order.slice(3), ['i1'], 'a freed slot goes to the waiting interactive call before flex');
});

t.test('fair: weights share a model’s time', async (t) => {
  // One slot, two projects that always wait: grants follow the weights (3 to 1).
  let clock = 0;
  const { order, take, release } = harness({ parallel: 1, queue: 1000, label: 'm', now: () => clock });
  for (let i = 0; i < 40; i++) {
    void take(`A${i}`, ticket('A', 'default', 3));
    void take(`B${i}`, ticket('B', 'default', 1));
  }
  await settle();
  for (let i = 0; i < 40; i++) {
    clock += 10;
    await release(order.at(-1)!);
  }
  const served = order.slice(1, 41);
  const a = served.filter((n) => n.startsWith('A')).length;
  t.ok(a >= 28 && a <= 32, `A got ${a} of 40 (3:1 is 30)`);
});

t.test('fair: a full queue refuses only the project that filled it', async (t) => {
  const { take } = harness({ parallel: 1, queue: 2, label: "The model 'm'" });
  void take('a0', ticket('A'));
  void take('a1', ticket('A'));
  void take('a2', ticket('A'));
  const refused = await take('a3', ticket('A')).then(
    () => null,
    (err: Error & { status?: number }) => err,
  );
  t.equal(refused?.status, 503);
  t.match(refused?.message, /The model 'm' is busy \(1 calls running, with 2 of this project's calls waiting\)/);
  const b = take('b0', ticket('B'));
  await settle();
  t.ok(await Promise.race([b.then(() => false), settle().then(() => true)]), 'B is queued, not refused');
});

for (const policy of ['fair', 'fifo'] as const) {
  t.test(`${policy}: with no queue, a free slot is still taken and only a call that would wait is refused`, async (t) => {
    const { slots, order, take } = harness({ parallel: 1, queue: 0, label: 'The PDF reader', policy });
    await take('a0', ticket('A'));
    t.same(order, ['a0'], 'the free slot is granted');
    const refused = await take('b0', ticket('B')).then(
      () => null,
      (err: Error & { status?: number }) => err,
    );
    t.equal(refused?.status, 503, 'the next call would wait: refused');
    t.match(refused?.message, /busy \(1 calls running/);
    t.same(slots.state, { busy: 1, waiting: 0, byTier: { priority: 0, default: 0, flex: 0 } }, 'nothing left waiting');
  });
}

t.test('an aborted waiting call leaves the queue; its place goes to the next', async (t) => {
  const { slots, order, take, release } = harness({ parallel: 1, queue: 8, label: 'm' });
  void take('a0', ticket('A'));
  const abort = new AbortController();
  const gone = take('a1', ticket('A'), abort.signal);
  void take('a2', ticket('A'));
  await settle();
  abort.abort(new Error('client disconnected'));
  await t.rejects(gone, /client disconnected/);
  t.same(slots.state, { busy: 1, waiting: 1, byTier: { priority: 0, default: 1, flex: 0 } });
  await release('a0');
  t.same(order, ['a0', 'a2']);
});

t.test('fifo: arrival order whatever the project, one bound for all', async (t) => {
  const { order, take, release } = harness({ parallel: 1, queue: 3, label: 'm', policy: 'fifo' });
  void take('a0', ticket('A'));
  void take('a1', ticket('A'));
  void take('a2', ticket('A'));
  void take('b0', ticket('B', 'priority'));
  const refused = await take('b1', ticket('B')).then(
    () => null,
    (err: Error & { status?: number }) => err,
  );
  t.equal(refused?.status, 503, 'the queue is one for all');
  for (const name of ['a0', 'a1', 'a2']) await release(name);
  t.same(order, ['a0', 'a1', 'a2', 'b0']);
});

t.test('fair: a guest slot serves, at once, a project holding none; one project alone never takes it', async (t) => {
  const { slots, order, take, release } = harness({ parallel: 2, guests: 1, queue: 32, label: 'm' });
  for (let i = 0; i < 6; i++) void take(`a${i}`, ticket('A'));
  void take('batch', ticket('Z', 'flex'));
  await settle();
  t.same(order, ['a0', 'a1'], 'A alone has `parallel` slots, and flex work no guest slot');
  void take('b0', ticket('B'));
  await settle();
  t.same(order, ['a0', 'a1', 'b0'], 'B is served at once, on the guest slot');
  void take('c0', ticket('C'));
  await settle();
  t.equal(order.length, 3, 'one guest at a time');
  t.same(slots.state.busy, 3);
  await release('b0');
  t.same(order.slice(3), ['c0'], 'C takes the guest slot B left');
});
