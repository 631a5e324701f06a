// How bench:gateway judges its goals (bench/gateway/goals.ts): the saturation ratio is the median of each round's own
// ratio, and the added p99 at a fixed rate is met only under its limit with every round measured and kept up, ours
// and the floor's.
import t from 'tap';
import { addedP99Goal, keptUp, median, roundRatio, type RateWindows } from '../bench/gateway/goals.js';
import type { LoadResult } from '../bench/gateway/load.js';

function result(fields: Partial<LoadResult>): LoadResult {
  return {
    rps: 1000,
    seconds: 5,
    ok: 5000,
    failed: 0,
    late: 0,
    sendDelayP99: 0,
    sendDelayMax: 0,
    p50: 0.5,
    p99: 1,
    max: 2,
    latencies: new Float64Array(),
    steadyLatencies: new Float64Array(),
    steadyP99: 1,
    ...fields,
  };
}

t.test('the saturation ratio pairs each round of ours with the same round of theirs', async (t) => {
  // The machine is fast in the first round and slow in the second. Each round is over 5x in two of three; the two
  // medians on their own (4,900 against 1,000) would say 4.9x.
  const ours = [6000, 4200, 4900];
  const theirs = [1150, 800, 1000];
  const { ratio, each } = roundRatio(ours, theirs);
  t.same(
    each.map((x) => x.toFixed(3)),
    ['5.217', '5.250', '4.900'],
  );
  t.equal(ratio.toFixed(3), '5.217');
  t.throws(() => roundRatio([1, 2], [1]), /rounds differ/);
});

t.test('the median of an even count is the lower middle one', async (t) => {
  t.equal(
    median([4, 1, 3, 2], (x) => x),
    2,
  );
  t.equal(median([{ rps: 3 }, { rps: 1 }, { rps: 2 }], (r) => r.rps).rps, 2);
});

t.test('a window kept up when every request was answered at 98% of the rate or more', async (t) => {
  t.ok(keptUp(result({ rps: 980 }), 1000));
  t.notOk(keptUp(result({ rps: 979 }), 1000), 'fell behind');
  t.notOk(keptUp(result({ failed: 1 }), 1000), 'a request failed');
});

t.test('the added p99 goal needs every round measured and kept up, ours and the floor’s', async (t) => {
  const windows = (p99: number, rounds: LoadResult[]): RateWindows => ({ pooled: result({ p99 }), rounds });
  const three = () => [result({}), result({}), result({})];

  const met = addedP99Goal(windows(1.8, three()), windows(1.0, three()), 1000, 3, 1);
  t.equal(met.added.toFixed(2), '0.80');
  t.ok(met.met && met.clean, 'under the limit with every round clean');

  const over = addedP99Goal(windows(2.1, three()), windows(1.0, three()), 1000, 3, 1);
  t.ok(over.clean);
  t.notOk(over.met, '1.1 ms over the floor is not under 1 ms');

  const behind = addedP99Goal(windows(1.5, [result({}), result({ rps: 950 }), result({})]), windows(1.0, three()), 1000, 3, 1);
  t.notOk(behind.met || behind.clean, 'a round of ours fell behind');

  const failed = addedP99Goal(windows(1.5, [result({}), result({}), result({ failed: 1 })]), windows(1.0, three()), 1000, 3, 1);
  t.notOk(failed.met || failed.clean, 'a request of ours failed');

  const floorMissing = addedP99Goal(windows(1.5, three()), windows(1.0, three().slice(1)), 1000, 3, 1);
  t.notOk(floorMissing.met || floorMissing.clean, 'a round of the floor was not measured');

  const floorBehind = addedP99Goal(windows(1.5, three()), windows(1.0, [result({ rps: 900 }), result({}), result({})]), 1000, 3, 1);
  t.notOk(floorBehind.met || floorBehind.clean, 'the floor fell behind in a round');
});
