// The batch runner shares its lines between projects, not between batches: a project that makes many batches gets no
// more of the runner than one that makes a single batch (each line still a call of its own key, at the flex tier).
import t from 'tap';
import { BatchRunner, BatchStore, FileStore, type LineAnswer, type LineCall } from '../daemon/batches/index.js';
import { openStore } from '../daemon/store/index.js';
import { tempDir } from './helpers/daemon.js';

const quiet = { info() {}, warn() {}, error() {} };

t.test('a project with many batches does not crowd out a project with one', async (t) => {
  const store = openStore(tempDir(t));
  const files = new FileStore(store, { ttlMs: 3600_000, maxBytesPerProject: 1 << 30 });
  const batches = new BatchStore(store, files);
  t.teardown(() => store.close());
  const batch = async (project: string, n: number) => {
    const file = await files.create(project, {
      filename: 'in.jsonl',
      purpose: 'batch',
      lines: Array.from({ length: n }, (_, i) =>
        JSON.stringify({ custom_id: `${project}-${i}`, method: 'POST', url: '/v1/embeddings', body: { model: 'm', input: `t ${i}` } }),
      ),
    });
    return batches.create(
      project,
      `key_${project}`,
      { inputFileId: file.id, lines: n, endpoint: '/v1/embeddings', completionWindow: '24h', metadata: null },
      3600_000,
    );
  };
  // The flooding project's ten batches exist before the other's one.
  for (let i = 0; i < 10; i++) await batch('flood', 10);
  await batch('steady', 10);
  const order: string[] = [];
  const runner = new BatchRunner({ batches, files, log: quiet, parallel: 1, backoffMs: { min: 5, max: 20 } });
  runner.start(async (c: LineCall): Promise<LineAnswer> => {
    order.push(c.projectId);
    return { status: 200, requestId: 'req_x', body: {}, retryAfterSeconds: null };
  });
  t.teardown(() => runner.stop(1000));
  for (const until = Date.now() + 10_000; order.length < 20 && Date.now() < until;) await new Promise((r) => setTimeout(r, 10));
  const steady = order.slice(0, 20).filter((p) => p === 'steady').length;
  t.ok(steady >= 9, `of the first 20 lines run, ${steady} are the single batch's project's (${order.slice(0, 20).join(' ')})`);
});
