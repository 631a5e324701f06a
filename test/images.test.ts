// Image generation: /v1/images/generations through an image server upstream (a small server written for this test
// that makes real images with sharp: always 640x480 JPEG with EXIF holding its prompt, whatever it is asked, so the
// daemon's normalising has work to do). Every image comes back at the size and in the format asked for, with no
// metadata; the prompt is scrubbed before it leaves; `url` answers are served by the daemon, to keys of the same
// project only, for images.urlTtlSeconds. A deployment without an image engine answers 404 operation_unavailable.
import http from 'node:http';
import { writeFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import OpenAI, { APIError } from 'openai';
import sharp from 'sharp';
import t from 'tap';
import { createKey, startDaemon, tempDir } from './helpers/daemon.js';
import { request } from './helpers/http.js';

const NATIONAL_ID = '1000000008';

const prompts: string[] = [];
const native = (prompt: string) =>
  sharp({ create: { width: 640, height: 480, channels: 3, background: { r: 200, g: 40, b: 40 } } })
    .jpeg()
    .withExif({ IFD0: { ImageDescription: prompt.slice(0, 60), Software: 'studio-server 1.0' } })
    .toBuffer();

const studio = http.createServer((req, res) => {
  const chunks: Buffer[] = [];
  req.on('data', (c: Buffer) => chunks.push(c));
  req.on('end', () => {
    void (async () => {
      if (req.method === 'GET' && req.url === '/v1/models') {
        res.setHeader('content-type', 'application/json');
        return res.end(JSON.stringify({ object: 'list', data: [{ id: 'studio-xl' }] }));
      }
      if (req.method === 'GET' && req.url === '/files/own.jpg') {
        res.setHeader('content-type', 'image/jpeg');
        return res.end(await native('served by url'));
      }
      const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as { prompt: string; n: number; model: string };
      prompts.push(body.prompt);
      res.setHeader('content-type', 'application/json');
      if (body.prompt === 'by url') return res.end(JSON.stringify({ created: 1, data: [{ url: '/files/own.jpg' }] }));
      if (body.prompt === 'elsewhere') return res.end(JSON.stringify({ created: 1, data: [{ url: 'http://127.0.0.2:9/x.png' }] }));
      if (body.prompt === 'rewrite') {
        const image = await native('x');
        // The engine's rewritten prompt repeats a national ID of its own: it must reach the client scrubbed.
        return res.end(
          JSON.stringify({ created: 1, data: [{ b64_json: image.toString('base64'), revised_prompt: `a red square for ${NATIONAL_ID}` }] }),
        );
      }
      if (body.prompt === 'garbage')
        return res.end(JSON.stringify({ created: 1, data: [{ b64_json: Buffer.from('not an image').toString('base64') }] }));
      const images = await Promise.all(Array.from({ length: body.n }, () => native(body.prompt)));
      res.end(JSON.stringify({ created: 1, data: images.map((i) => ({ b64_json: i.toString('base64') })) }));
    })();
  });
});
await new Promise<void>((resolve) => studio.listen(0, '127.0.0.1', resolve));
t.teardown(() => studio.close());

const dir = tempDir(t);
const dataDir = join(dir, 'data');
const config = join(dir, 'config.json');
writeFileSync(
  config,
  JSON.stringify({
    images: { urlTtlSeconds: 2 },
    upstreams: [
      {
        name: 'gpu-studio',
        baseUrl: `http://127.0.0.1:${(studio.address() as AddressInfo).port}/v1`,
        models: [{ id: 'studio', upstreamModel: 'studio-xl', capability: 'image' }],
      },
    ],
  }),
);
const key = createKey(dataDir, 'design');
const otherProject = createKey(dataDir, 'finance');
const daemon = await startDaemon(t, ['--data-dir', dataDir, '--config', config]);
const client = new OpenAI({ apiKey: key.secret, baseURL: daemon.baseURL, maxRetries: 0 });
for (const until = Date.now() + 10_000; !(await client.models.list()).data.some((m) => m.id === 'studio') && Date.now() < until;) {
  await new Promise((resolve) => setTimeout(resolve, 100));
}
// The SDK's types list OpenAI's own sizes; the API takes any size in range.
const generate = (params: Record<string, unknown>) =>
  client.images.generate({ model: 'studio', prompt: 'a red square', ...params } as unknown as OpenAI.ImageGenerateParamsNonStreaming);

t.test('the image model is listed; each image has the size and format asked for, and no metadata', async (t) => {
  const models = await client.models.list();
  t.match(
    models.data.find((m) => m.id === 'studio'),
    { owned_by: 'gpu-studio' },
  );
  const cases: Array<[string, 'png' | 'jpeg' | 'webp', number, number]> = [
    ['256x256', 'png', 256, 256],
    ['1024x768', 'jpeg', 1024, 768],
    ['512x896', 'webp', 512, 896],
  ];
  for (const [size, format, width, height] of cases) {
    const r = await generate({ size, output_format: format, response_format: 'b64_json' });
    t.equal(r.data!.length, 1);
    const bytes = Buffer.from(r.data![0].b64_json!, 'base64');
    const meta = await sharp(bytes).metadata();
    t.match(meta, { format, width, height }, `${size} ${format}`);
    t.notOk(meta.exif, `${format}: no EXIF (the server's held its prompt)`);
    t.notOk(meta.icc, `${format}: no ICC profile`);
    t.notOk(meta.xmp, `${format}: no XMP`);
    t.notOk(bytes.includes(Buffer.from('studio-server')), `${format}: nothing of the server's metadata in the bytes`);
  }
  const auto = await generate({ size: 'auto', response_format: 'b64_json' });
  t.match(
    await sharp(Buffer.from(auto.data![0].b64_json!, 'base64')).metadata(),
    { format: 'png', width: 640, height: 480 },
    "auto: the engine's own size, png by default",
  );

  const three = await generate({ n: 3, size: '128x128', response_format: 'b64_json' });
  t.equal(three.data!.length, 3, 'n images');
  const compressed = await generate({ size: '512x512', output_format: 'jpeg', output_compression: 10, response_format: 'b64_json' });
  const full = await generate({ size: '512x512', output_format: 'jpeg', output_compression: 100, response_format: 'b64_json' });
  t.ok(compressed.data![0].b64_json!.length < full.data![0].b64_json!.length, 'output_compression is honoured');
});

t.test('the prompt is scrubbed before it leaves; a rewritten prompt is scrubbed on its way back', async (t) => {
  prompts.length = 0;
  const plain = await generate({ prompt: `a badge for employee ${NATIONAL_ID}`, size: '64x64', response_format: 'b64_json' });
  t.same(prompts, ['a badge for employee [NATIONAL_ID]']);
  t.notOk('revised_prompt' in plain.data![0], 'no revised_prompt when the engine sent none');
  const rewritten = await generate({ prompt: 'rewrite', size: '64x64', response_format: 'b64_json' });
  t.equal(rewritten.data![0].revised_prompt, 'a red square for [NATIONAL_ID]');
});

t.test('url answers: served by the daemon to the same project, for a limited time', async (t) => {
  const r = await generate({ size: '300x200' });
  const url = r.data![0].url!;
  t.match(url, new RegExp(`^${daemon.baseURL}/images/files/[A-Za-z0-9_-]{24}\\.png$`));
  t.notOk(r.data![0].b64_json);
  const got = await request(url, { headers: { authorization: `Bearer ${key.secret}` } });
  t.equal(got.status, 200);
  t.equal(got.headers['content-type'], 'image/png');
  t.match(got.headers['cache-control'], /^private, max-age=[0-2]$/);
  t.ok(got.headers['x-audit-leaf'], 'fetching it is an audited call');
  const png = await fetch(url, { headers: { authorization: `Bearer ${key.secret}` } });
  t.match(await sharp(Buffer.from(await png.arrayBuffer())).metadata(), { width: 300, height: 200, format: 'png' });

  t.equal((await request(url)).status, 401, 'no key: 401');
  const other = await request(url, { headers: { authorization: `Bearer ${otherProject.secret}` } });
  t.equal(other.status, 404, "another project's key: as if it did not exist");
  t.equal(other.json.error.code, 'not_found');
  await new Promise((resolve) => setTimeout(resolve, 2200));
  const expired = await request(url, { headers: { authorization: `Bearer ${key.secret}` } });
  t.equal(expired.status, 404, 'gone after images.urlTtlSeconds');
  t.match(expired.json.error.message, /image URLs last 2 s/);
});

t.test("an engine's own URL is fetched from it, and from nowhere else; an unreadable image is an error", async (t) => {
  const byUrl = await generate({ prompt: 'by url', size: '100x100', response_format: 'b64_json' });
  t.match(await sharp(Buffer.from(byUrl.data![0].b64_json!, 'base64')).metadata(), { width: 100, height: 100 });
  const elsewhere = await generate({ prompt: 'elsewhere', size: '100x100', response_format: 'b64_json' }).catch((e: APIError) => e);
  t.equal((elsewhere as APIError).status, 500);
  t.notMatch((elsewhere as APIError).message, /127\.0\.0\.2/, 'the address is not shown');
  const garbage = await generate({ prompt: 'garbage', size: '100x100', response_format: 'b64_json' }).catch((e: APIError) => e);
  t.equal((garbage as APIError).status, 500);
  t.match((garbage as APIError).message, /sent an image that cannot be read/);
});

t.test('bad requests say what to change', async (t) => {
  const call = (body: Record<string, unknown>) =>
    request(`${daemon.baseURL}/images/generations`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key.secret}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'studio', prompt: 'x', ...body }),
    });
  const huge = await call({ size: '9000x9000' });
  t.equal(huge.status, 400);
  t.equal(huge.json.error.param, 'size');
  const tiny = await call({ size: '32x32' });
  t.match(tiny.json.error.message, /each side from 64 to 4096 pixels/);
  const pngCompression = await call({ output_compression: 50 });
  t.equal(pngCompression.json.error.param, 'output_compression');
  const tooMany = await call({ n: 11 });
  t.equal(tooMany.status, 400);
  const unknown = await call({ model: 'dall-e-3' });
  t.equal(unknown.status, 404);
  t.equal(unknown.json.error.code, 'model_not_found');
  const noPrompt = await call({ prompt: undefined });
  t.equal(noPrompt.status, 400);
});

t.test('without an image engine: not listed, 404 operation_unavailable', async (t) => {
  const plainData = join(dir, 'plain');
  const plainKey = createKey(plainData);
  const plain = await startDaemon(t, ['--data-dir', plainData]);
  const plainClient = new OpenAI({ apiKey: plainKey.secret, baseURL: plain.baseURL, maxRetries: 0 });
  const err = (await plainClient.images.generate({ prompt: 'a red square' }).catch((e: unknown) => e)) as APIError;
  t.equal(err.status, 404);
  t.equal(err.code, 'operation_unavailable');
  t.match(err.message, /no image engine/);
  await plain.stop();
});
