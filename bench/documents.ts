// Document retrieval at scale: a deterministic bilingual corpus (English and Arabic) ingested into one knowledge
// base through DocumentLibrary.add with a real embeddings engine, then queries through DocumentLibrary.search.
// Ingestion chunks/s against two baselines measured in the same run, interleaved with the ingestion so that all run
// under the same load: the same documents ingested into a second knowledge base by an engine that embeds one input
// at a time (embeddingContexts 1, the engine before its pool of contexts), and the engine's raw embedding throughput
// on the same chunk texts. Then query p50/p95/p99 (hybrid and lexical) against the bare parts of a query (its
// embedding, BM25 alone, the HNSW search alone) on the same queries and the same indexes. No network.
//
//   npm run bench:documents                        100,000 chunks, 500 queries, a generated tiny embeddings model
//   npm run bench:documents -- --model FILE.gguf   an operator's real embeddings model
//   options: --chunks N (default 100000), --queries N (default 500), --contexts N (the engine's embeddingContexts,
//            default 2 as the daemon's), --baseline-every N (every Nth document is also ingested one input at a
//            time, default 2)
import { mkdtempSync, rmSync } from 'node:fs';
import { availableParallelism, tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import type { HierarchicalNSW } from 'hnswlib-node';
import { readGgufFileInfo } from 'node-llama-cpp';
import type { Bm25Index } from '../daemon/documents/bm25.js';
import { chunkText, DEFAULT_CHUNKING } from '../daemon/documents/chunk.js';
import { DocumentLibrary } from '../daemon/documents/library.js';
import type { Embedder } from '../daemon/documents/vectors.js';
import { LlamaEngine } from '../daemon/engines/llama/engine.js';
import { llamaRuntime } from '../daemon/engines/llama/runtime.js';
import type { ManifestEntry } from '../daemon/models/manifest.js';
import { noRedactions } from '../daemon/scrub/session.js';
import { openStore, type Store } from '../daemon/store/index.js';
import { writeTinyGguf } from '../test/fixtures/gguf.js';
import { generator } from '../test/fixtures/scrub-corpus.js';
import { appendResult } from './results.js';

const { values } = parseArgs({
  options: {
    chunks: { type: 'string' },
    queries: { type: 'string' },
    model: { type: 'string' },
    contexts: { type: 'string' },
    'baseline-every': { type: 'string' },
  },
});
const targetChunks = Number(values.chunks ?? 100_000);
const queryCount = Number(values.queries ?? 500);
const contexts = Number(values.contexts ?? 2);
const baselineEvery = Number(values['baseline-every'] ?? 2);
for (const [name, value] of [
  ['--chunks', targetChunks],
  ['--queries', queryCount],
  ['--contexts', contexts],
  ['--baseline-every', baselineEvery],
] as const) {
  if (!(Number.isInteger(value) && value >= 1)) throw new Error(`${name} takes a positive integer`);
}

/** Every load loop is bounded in count and in time. */
const INGEST_CAP_SECONDS = 3600;
const QUERY_CAP_SECONDS = 300;
/**
 * The raw-throughput baseline: after every RAW_EVERY-th document, its first EMBED_BATCH chunks are embedded again
 * directly, so the baseline runs on the same texts, interleaved with ingestion, under the same load. The library
 * embeds in batches of 16 (vectors.ts); the baseline does too.
 */
const RAW_EVERY = 4;
const EMBED_BATCH = 16;
const WARMUP_QUERIES = 20;
const TOP_K = 5;
const GOAL_P95_MS = 30;
/** Ingestion with the engine's pool of contexts against the one-input-at-a-time engine. */
const GOAL_INGEST_RATIO = 3;
const PROJECT = 'bench';
const KB = 'handbook';
/** Where the baseline engine ingests the same documents. */
const BASELINE_KB = 'handbook-one-at-a-time';
const PROGRESS_EVERY_MS = 5000;

// ---------------------------------------------------------------------------------------------------------------
// The corpus: sentences drawn word by word. Content words follow a Zipf–Mandelbrot law over a vocabulary of real
// words (the head) and generated ones (the long tail), so posting lists range from most chunks down to a handful;
// each document also repeats a few topic words of its own, as real documents do. Function words the index keeps
// ("how", "can", "يجب") are as frequent as in real text.

const ENGLISH_WORDS = `account transfer branch customer card loan payment statement balance deposit withdrawal interest rate fee
charge policy procedure form request application approval manager employee department office service support complaint
claim insurance contract agreement invoice receipt record report review audit compliance risk security access password
system network server database backup update release version license training course schedule meeting project budget
cost expense salary allowance leave vacation holiday permit residence visa passport identity document certificate
registration renewal expiry date deadline notice letter email phone address city region district hospital clinic
patient doctor nurse appointment prescription medicine treatment diagnosis laboratory test result coverage emergency
pharmacy referral vaccination school student teacher exam grade university scholarship library vehicle traffic
violation fine road parking plate property lease rent tenant landlord electricity water bill meter supplier purchase
order tender delivery warehouse stock inventory shipment customs tax zakat return refund exchange currency riyal
transaction limit daily monthly annual quarterly committee board director chairman minutes decision resolution
signature stamp archive retention privacy consent data breach incident response recovery continuity plan strategy
target performance indicator quality standard inspection maintenance repair equipment device laptop printer software
cloud appliance branch counter queue ticket customer visit hours weekend morning evening staff team supervisor
officer clerk analyst engineer contractor vendor partner client member family dependent spouse child parent guardian
employer sponsor salary bonus pension gratuity termination resignation probation promotion transfer evaluation goal
objective task deadline milestone approval exception waiver escalation priority severity category status pending
approved rejected closed open draft final copy original scan upload download portal website application mobile
message notification reminder alert confirmation code verification token session login account profile settings`;

const ARABIC_WORDS = `حساب تحويل فرع عميل بطاقة قرض دفع كشف رصيد إيداع سحب فائدة رسوم سياسة إجراء نموذج طلب موافقة مدير
موظف إدارة مكتب خدمة دعم شكوى مطالبة تأمين عقد اتفاقية فاتورة إيصال سجل تقرير مراجعة تدقيق امتثال مخاطر أمن وصول نظام
شبكة خادم قاعدة نسخة تحديث إصدار ترخيص تدريب دورة جدول اجتماع مشروع ميزانية تكلفة مصروف راتب بدل إجازة عطلة تصريح إقامة
تأشيرة جواز هوية وثيقة شهادة تسجيل تجديد انتهاء تاريخ موعد إشعار خطاب بريد هاتف عنوان مدينة منطقة حي مستشفى عيادة مريض
طبيب ممرضة وصفة دواء علاج تشخيص مختبر فحص نتيجة تغطية طوارئ صيدلية إحالة تطعيم مدرسة طالب معلم اختبار درجة جامعة منحة
مكتبة مركبة مرور مخالفة غرامة طريق موقف لوحة عقار إيجار مستأجر مالك كهرباء مياه عداد مورد شراء مناقصة توصيل مستودع مخزون
شحنة جمارك ضريبة زكاة استرداد صرف عملة ريال معاملة يومي شهري سنوي لجنة مجلس رئيس محضر قرار توقيع ختم أرشيف خصوصية بيانات
حادث استجابة استعادة خطة استراتيجية هدف أداء مؤشر جودة معيار تفتيش صيانة إصلاح جهاز طابعة برنامج سحابة موقع تطبيق رسالة
تنبيه تذكير رمز تحقق ملف مستخدم كفيل أسرة تابع زوج طفل والد صاحب مكافأة معاش نهاية استقالة تجربة ترقية تقييم مهمة استثناء
أولوية حالة معلق مقبول مرفوض مسودة نهائي أصل مسح رفع تنزيل بوابة منصة فريق مشرف موظفة محاسب مهندس مقاول شريك عضو زيارة
ساعات نافذة تذكرة صباح مساء أسبوع شهر سنة ميلادي هجري`;

/** Function words: the index drops some (text.ts STOPWORDS) and keeps the rest, which makes its longest lists. */
const ENGLISH_FUNCTION = `the of and to in for is on that by this with be are from at as it or will has an was have not can should
must may all any each other after before within under over more than also which who when where how what if then
there their they we our you your been into about per such only no so do does i my please`.split(/\s+/);
const ARABIC_FUNCTION = `في من على إلى عن أن أو ثم هو هي هذا هذه ذلك التي الذي مع كان قد لا ما كل بعض عند بعد قبل حتى إذا
لكن أي غير بين خلال حول عبر لدى تم يتم يجب يمكن عدم أيضا فقط كما حيث كيف متى أين هل نحن أنت`.split(/\s+/);

type Lang = 'en' | 'ar';
type Rand = ReturnType<typeof generator>;
const uniform = (rand: Rand) => rand.next(0x100000000) / 0x100000000;

/** The long tail: pronounceable English-like words and Arabic words built on three-letter roots. */
function tailWords(lang: Lang, count: number, taken: Set<string>): string[] {
  const rand = generator(lang === 'en' ? 101 : 202);
  const onsets = 'b c d f g h j k l m n p r s t v w z br cr dr fl gr pl st tr sh ch th'.split(' ');
  const vowels = 'a e i o u ai ea ou io'.split(' ');
  const codas = ['', 'n', 'r', 'l', 't', 'm', 'nd', 'x', 'k'];
  const letters = [...'بتثجحخدذرزسشصضطظعغفقكلمنهوي'];
  const patterns = ['1ا23', 'م12و3', 'ت12ي3', '12ا3ة', 'است12ا3', 'م12ا3', '12ي3', 'ا12ا3', 'م1ا23ة', 'ت1ا2ي3', 'م12و3ات'];
  const out: string[] = [];
  while (out.length < count) {
    let word: string;
    if (lang === 'en') {
      word = '';
      for (let s = 2 + rand.next(2); s > 0; s--) word += rand.pick(onsets) + rand.pick(vowels);
      word += rand.pick(codas);
    } else {
      const root = [rand.pick(letters), rand.pick(letters), rand.pick(letters)];
      word = rand.pick(patterns).replace(/[123]/g, (d) => root[Number(d) - 1]);
    }
    if (taken.has(word)) continue;
    taken.add(word);
    out.push(word);
  }
  return out;
}

/** Draws ranks 0..n-1 with weight 1/(rank + 1 + q)^s. */
class Zipf {
  private readonly cumulative: Float64Array;
  constructor(n: number, q: number, s: number) {
    this.cumulative = new Float64Array(n);
    let sum = 0;
    for (let r = 0; r < n; r++) this.cumulative[r] = sum += 1 / (r + 1 + q) ** s;
  }
  sample(rand: Rand): number {
    const x = uniform(rand) * this.cumulative[this.cumulative.length - 1];
    let lo = 0;
    let hi = this.cumulative.length - 1;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (this.cumulative[mid] < x) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }
}

const TAIL_WORDS = 40_000;
/** Rank shift that flattens the head: the most common content word is in about half the chunks. */
const ZIPF_Q = 10;

interface Language {
  words: string[];
  zipf: Zipf;
  function: Zipf;
  functionWords: string[];
}

function language(lang: Lang): Language {
  const head = [...new Set((lang === 'en' ? ENGLISH_WORDS : ARABIC_WORDS).split(/\s+/))];
  const shuffled = generator(lang === 'en' ? 11 : 22);
  for (let i = head.length - 1; i > 0; i--) {
    const j = shuffled.next(i + 1);
    [head[i], head[j]] = [head[j], head[i]];
  }
  const functionWords = lang === 'en' ? ENGLISH_FUNCTION : ARABIC_FUNCTION;
  const words = [...head, ...tailWords(lang, TAIL_WORDS, new Set([...head, ...functionWords]))];
  return { words, zipf: new Zipf(words.length, ZIPF_Q, 1), function: new Zipf(functionWords.length, 2, 1), functionWords };
}

const LANGUAGES: Record<Lang, Language> = { en: language('en'), ar: language('ar') };
const ARABIC_DIGITS = '٠١٢٣٤٥٦٧٨٩';
/** The article and the conjunctions fused to it, which the index strips (text.ts). */
const ARABIC_PREFIXES = ['ال', 'ال', 'ال', 'وال', 'بال', 'لل'];

function word(rand: Rand, lang: Lang, rank: number): string {
  const w = LANGUAGES[lang].words[rank];
  return lang === 'ar' && rand.next(2) === 0 ? rand.pick(ARABIC_PREFIXES) + w : w;
}

function numberWord(rand: Rand, lang: Lang): string {
  const kind = rand.next(3);
  const n = kind === 0 ? String(2015 + rand.next(12)) : kind === 1 ? String(100 + rand.next(99_900)) : rand.digits(7);
  return lang === 'ar' && rand.next(2) === 0 ? n.replace(/\d/g, (d) => ARABIC_DIGITS[Number(d)]) : n;
}

function sentence(rand: Rand, lang: Lang, topic: number[]): string {
  const { zipf, function: fn, functionWords } = LANGUAGES[lang];
  const words: string[] = [];
  for (let n = 8 + rand.next(14); n > 0; n--) {
    const r = rand.next(100);
    if (r < 38) words.push(functionWords[fn.sample(rand)]);
    else if (r < 40) words.push(numberWord(rand, lang));
    else if (r < 55 && topic.length) words.push(word(rand, lang, rand.pick(topic)));
    else words.push(word(rand, lang, zipf.sample(rand)));
  }
  const end = rand.next(10) === 0 ? (lang === 'en' ? '?' : '؟') : '.';
  const text = words.join(' ');
  return `${lang === 'en' ? text[0].toUpperCase() + text.slice(1) : text}${end}`;
}

interface GeneratedDocument {
  lang: Lang;
  content: string;
  chunks: string[];
}

/** Documents in a fixed order for a seed: the same seed makes the same documents. */
class Corpus {
  private readonly rand: Rand;
  constructor(seed: number) {
    this.rand = generator(seed);
  }

  /** A document of about `wanted` chunks (never more, unless one paragraph alone makes more). */
  document(wanted: number): GeneratedDocument {
    const rand = this.rand;
    const lang: Lang = rand.next(100) < 55 ? 'en' : 'ar';
    const other: Lang = lang === 'en' ? 'ar' : 'en';
    const topic = Array.from({ length: 12 }, () => 30 + rand.next(3000));
    const paragraphs: string[] = [];
    let length = 0;
    // Each chunk brings about 800 characters of its own (the rest is the overlap with the one before).
    while (length < wanted * 800) {
      const sentences: string[] = [];
      for (let n = 5 + rand.next(8); n > 0; n--)
        sentences.push(rand.next(100) < 8 ? sentence(rand, other, []) : sentence(rand, lang, topic));
      const paragraph = sentences.join(' ');
      paragraphs.push(paragraph);
      length += paragraph.length + 2;
    }
    let chunks = chunkText(paragraphs.join('\n\n'), DEFAULT_CHUNKING);
    while (chunks.length > wanted && paragraphs.length > 1) {
      paragraphs.pop();
      chunks = chunkText(paragraphs.join('\n\n'), DEFAULT_CHUNKING);
    }
    return { lang, content: paragraphs.join('\n\n'), chunks };
  }

  /** The next document's size: 20 to 80 chunks, 50 on average. */
  size(): number {
    return 20 + this.rand.next(61);
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Queries: English and Arabic, of four kinds. Rare: two or three tail words (a name, a code). Common: the head's
// words. Mixed: one of each, and a middle one. Long: a whole question pasted in, drawn like the corpus's sentences.

const KINDS = ['rare', 'common', 'mixed', 'long'] as const;
type Kind = (typeof KINDS)[number];
interface Query {
  lang: Lang;
  kind: Kind;
  text: string;
}

function makeQueries(count: number, seed: number): Query[] {
  const rand = generator(seed);
  const range = (from: number, to: number) => from + rand.next(to - from);
  const out: Query[] = [];
  for (let i = 0; i < count; i++) {
    const lang: Lang = i % 2 === 0 ? 'en' : 'ar';
    const kind = KINDS[Math.floor(i / 2) % KINDS.length];
    const { words, functionWords } = LANGUAGES[lang];
    const fn = () => rand.pick(functionWords);
    let text: string;
    switch (kind) {
      case 'rare':
        text = Array.from({ length: 2 + rand.next(2) }, () => word(rand, lang, range(5000, words.length))).join(' ');
        break;
      case 'common':
        text = [fn(), word(rand, lang, range(0, 60)), fn(), word(rand, lang, range(0, 60)), word(rand, lang, range(0, 60))].join(' ');
        break;
      case 'mixed':
        text = [
          fn(),
          word(rand, lang, range(0, 60)),
          fn(),
          word(rand, lang, range(300, 3000)),
          word(rand, lang, range(5000, words.length)),
        ].join(' ');
        break;
      case 'long':
        text = sentence(rand, lang, []);
        break;
    }
    out.push({ lang, kind, text });
  }
  return out;
}

// ---------------------------------------------------------------------------------------------------------------
// Helpers

const quantile = (sorted: number[], q: number) => sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))];
const sortedOf = (xs: number[]) => [...xs].sort((a, b) => a - b);
const ms = (x: number) => `${x < 10 ? x.toFixed(2) : x.toFixed(1)} ms`;
const int = (x: number) => Math.round(x).toLocaleString('en-US');
const progress = (line: string) => process.stderr.write(`${line}\n`);

/** The library's own BM25 index and HNSW graph, for timing them alone; private fields, checked. */
function internals(library: DocumentLibrary, project: string, knowledgeBase: string): { bm25: Bm25Index; graph: HierarchicalNSW } {
  const reached = library as unknown as {
    indexes?: Map<string, Bm25Index>;
    vectors?: { graphs?: Map<string, { index?: HierarchicalNSW }> };
  };
  // Keyed by project and knowledge base, joined by one separator character.
  const of = <T>(map: Map<string, T> | undefined) => {
    for (const [key, value] of map ?? []) {
      if (key.length === project.length + knowledgeBase.length + 1 && key.startsWith(project) && key.endsWith(knowledgeBase)) return value;
    }
    return undefined;
  };
  const bm25 = of(reached.indexes);
  const graph = of(reached.vectors?.graphs)?.index;
  if (!bm25 || !graph) {
    throw new Error(
      'DocumentLibrary no longer keeps its indexes where bench/documents.ts looks (indexes, vectors.graphs): update the bench',
    );
  }
  return { bm25, graph };
}

// ---------------------------------------------------------------------------------------------------------------
// The engine: a generated tiny embeddings model as the tests use (32 dimensions), or an operator's model.

const work = mkdtempSync(join(tmpdir(), 'sov-bench-documents-'));
// Interrupted (the run takes minutes): still remove the temporary directory.
for (const name of ['SIGINT', 'SIGTERM'] as const) {
  process.once(name, () => {
    rmSync(work, { recursive: true, force: true });
    process.exit(130);
  });
}
const threads = availableParallelism();
let engine: LlamaEngine | undefined;
let baselineEngine: LlamaEngine | undefined;
let oneThreadEngine: LlamaEngine | undefined;
let store: Store | undefined;
try {
  const modelPath = values.model ? resolve(values.model) : join(work, 'tiny-embed.gguf');
  let entry: ManifestEntry;
  const base: Omit<ManifestEntry, 'id' | 'capability' | 'context'> = {
    file: 'model.gguf',
    sha256: null,
    size: null,
    engine: 'llama.cpp',
    languages: ['ar', 'en'],
    needs: { ramBytes: 0, vramBytes: 0, gpuRequired: false },
    ownedBy: 'bench',
  };
  if (values.model) {
    // As the daemon serves a manifest entry without servingContext: the trained context, at most 8192.
    const info = await readGgufFileInfo(modelPath, { readTensorInfo: false, sourceType: 'filesystem', logWarnings: false });
    const context = Number((info.architectureMetadata as { context_length?: number }).context_length ?? 512);
    entry = { ...base, id: 'embed', capability: 'embeddings', context };
  } else {
    writeTinyGguf(modelPath, { seed: 7, embedding: 32, heads: 2, name: 'tiny-embed' });
    entry = { ...base, id: 'embed', capability: 'embeddings', context: 1024, servingContext: 256 };
  }
  const llama = await llamaRuntime({
    gpu: values.model ? 'auto' : 'off',
    threads,
    log: (level, message) => progress(`llama.cpp ${level}: ${message}`),
  });
  const engineOptions = { threads, parallel: 2, queue: 32, gpu: values.model ? ('auto' as const) : ('off' as const) };
  engine = new LlamaEngine(llama, { ...engineOptions, embeddingContexts: contexts });
  await engine.load(entry, modelPath);
  const loaded = engine;
  const dimensions = loaded.dimensions(entry.id).size;
  baselineEngine = new LlamaEngine(llama, { ...engineOptions, embeddingContexts: 1 });
  await baselineEngine.load(entry, modelPath);
  const baselineLoaded = baselineEngine;
  // Where the pool's gain comes from: one input at a time again, but each decode on one thread (a decode split over
  // threads waits for the slowest at every step, which small models and busy machines pay for most).
  oneThreadEngine = new LlamaEngine(llama, { ...engineOptions, threads: 1, embeddingContexts: 1 });
  await oneThreadEngine.load(entry, modelPath);
  const oneThreadLoaded = oneThreadEngine;

  /** The daemon's embedder (routes/documents.ts), timing its calls so ingestion can be split into embedding and the rest. */
  let embedMs = 0;
  const embedder: Embedder = {
    model: entry.id,
    async embed(texts, signal) {
      const start = performance.now();
      const result = await loaded.embed(entry.id, texts, signal ?? new AbortController().signal, { truncate: true });
      embedMs += performance.now() - start;
      return result.vectors;
    },
  };
  /** The same, on the engine that embeds one input at a time. */
  const baselineEmbedder: Embedder = {
    model: entry.id,
    async embed(texts, signal) {
      return (await baselineLoaded.embed(entry.id, texts, signal ?? new AbortController().signal, { truncate: true })).vectors;
    },
  };

  const signal = new AbortController().signal;
  /** The ingestion baseline: the engine alone on chunk texts, in the library's batch size. */
  let rawMs = 0;
  let rawChunks = 0;
  let oneThreadMs = 0;
  const raw = async (texts: string[]) => {
    let start = performance.now();
    await loaded.embed(entry.id, texts, signal, { truncate: true });
    rawMs += performance.now() - start;
    rawChunks += texts.length;
    start = performance.now();
    await oneThreadLoaded.embed(entry.id, texts, signal, { truncate: true });
    oneThreadMs += performance.now() - start;
  };
  await loaded.embed(entry.id, ['warm up', 'تهيئة'], signal, { truncate: true });
  await baselineLoaded.embed(entry.id, ['warm up', 'تهيئة'], signal, { truncate: true });
  progress(
    `model ${values.model ?? 'generated tiny-embed (32 dimensions, servingContext 256)'}: ${dimensions} dimensions, ${threads} threads, ` +
      `${contexts} embedding contexts (baseline: 1)`,
  );

  // -------------------------------------------------------------------------------------------------------------
  // Ingestion

  const dataDir = join(work, 'data');
  const limits = { chunksPerDocument: 2000, documentsPerKnowledgeBase: 10_000, vectorsDir: join(dataDir, 'vectors') };
  const log = { info: () => {}, warn: (obj: object, msg: string) => progress(`library warn: ${msg} ${JSON.stringify(obj)}`) };
  store = openStore(dataDir);
  let library = new DocumentLibrary(store, { ...limits, log });
  await library.open();
  // A daemon that has answered a query since it started keeps the knowledge base's BM25 index in memory and adds
  // to it as documents arrive; a first search here makes it so (on the empty knowledge base).
  await library.search(PROJECT, KB, 'warm', TOP_K, null);
  await library.search(PROJECT, BASELINE_KB, 'warm', TOP_K, null);

  const corpus = new Corpus(1);
  let chunks = 0;
  let documents = 0;
  let characters = 0;
  let chunkCharacters = 0;
  let generateMs = 0;
  let chunkMs = 0;
  let addMs = 0;
  let baselineAddMs = 0;
  let baselineChunks = 0;
  const perDocument: Array<{ chunks: number; addMs: number; embedMs: number }> = [];
  const languages = { en: 0, ar: 0 };
  const ingestStart = performance.now();
  let lastProgress = ingestStart;
  let capped = false;
  while (chunks < targetChunks) {
    if (performance.now() - ingestStart > INGEST_CAP_SECONDS * 1000) {
      capped = true;
      break;
    }
    let t = performance.now();
    const doc = corpus.document(Math.min(corpus.size(), targetChunks - chunks));
    generateMs += performance.now() - t;
    // The library chunks again inside add(); this measures that step alone.
    t = performance.now();
    chunkText(doc.content, DEFAULT_CHUNKING);
    chunkMs += performance.now() - t;
    const upload = (knowledgeBase: string) => ({
      knowledgeBase,
      content: doc.content,
      filename: `doc-${documents}.txt`,
      metadata: { lang: doc.lang },
      redactions: noRedactions(),
    });
    // The baseline's turn comes before or after the measured add() in turn, so neither always follows the other.
    const baselineTurn = documents % baselineEvery === 0 ? ((documents / baselineEvery) % 2 === 0 ? 'before' : 'after') : null;
    const baseline = async () => {
      const start = performance.now();
      const added = await library.add(PROJECT, upload(BASELINE_KB), baselineEmbedder);
      baselineAddMs += performance.now() - start;
      baselineChunks += added.chunkIds.length;
    };
    if (baselineTurn === 'before') await baseline();
    const embedBefore = embedMs;
    t = performance.now();
    const record = await library.add(PROJECT, upload(KB), embedder);
    const took = performance.now() - t;
    addMs += took;
    if (baselineTurn === 'after') await baseline();
    perDocument.push({ chunks: record.chunkIds.length, addMs: took, embedMs: embedMs - embedBefore });
    chunks += record.chunkIds.length;
    characters += doc.content.length;
    chunkCharacters += doc.chunks.reduce((n, c) => n + c.length, 0);
    languages[doc.lang] += record.chunkIds.length;
    documents++;
    if (documents % RAW_EVERY === 1) await raw(doc.chunks.slice(0, EMBED_BATCH));
    if (performance.now() - lastProgress >= PROGRESS_EVERY_MS) {
      lastProgress = performance.now();
      const rate = chunks / ((lastProgress - ingestStart) / 1000);
      progress(
        `ingested ${int(chunks)} / ${int(targetChunks)} chunks (${documents} documents): add() ${(chunks / (addMs / 1000)).toFixed(0)} chunks/s, ` +
          `one at a time ${(baselineChunks / (baselineAddMs / 1000)).toFixed(0)} chunks/s, raw embedding ${(rawChunks / (rawMs / 1000)).toFixed(0)} chunks/s; about ${Math.ceil((targetChunks - chunks) / rate / 60)} min left`,
      );
    }
  }
  const ingestWallMs = performance.now() - ingestStart;
  const ingestEmbedMs = embedMs;
  const ingestRate = chunks / (addMs / 1000);
  const meanChunk = chunkCharacters / chunks;
  const rss = process.memoryUsage().rss;

  const rawRate = rawChunks / (rawMs / 1000);
  const oneThreadRate = rawChunks / (oneThreadMs / 1000);
  const baselineRate = baselineChunks / (baselineAddMs / 1000);
  const ingestRatio = ingestRate / baselineRate;

  // Library overhead per chunk (everything in add() but the embedder), early documents against late ones.
  const overheadPerChunk = (docs: typeof perDocument) =>
    docs.reduce((n, d) => n + d.addMs - d.embedMs, 0) /
    Math.max(
      1,
      docs.reduce((n, d) => n + d.chunks, 0),
    );
  const tenth = Math.max(1, Math.floor(perDocument.length / 10));
  const overheadEarly = overheadPerChunk(perDocument.slice(0, tenth));
  const overheadLate = overheadPerChunk(perDocument.slice(-tenth));

  // -------------------------------------------------------------------------------------------------------------
  // A restart: graphs saved and verified, BM25 built again from lmdb, both by open() in slices of the event loop.

  await library.close();
  await store.close();
  store = openStore(dataDir);
  library = new DocumentLibrary(store, { ...limits, log });
  // The longest the event loop is held at a stretch, from opening to the first answer (nothing else runs meanwhile).
  const stall = monitorEventLoopDelay({ resolution: 10 });
  stall.enable();
  await new Promise((r) => setTimeout(r, 50)); // the monitor counts from its first tick
  let t = performance.now();
  await library.open();
  const openMs = performance.now() - t;
  const queries = makeQueries(queryCount, 3);
  t = performance.now();
  await library.search(PROJECT, KB, queries[0].text, TOP_K, embedder);
  const firstQueryMs = performance.now() - t;
  await new Promise((r) => setTimeout(r, 50));
  stall.disable();
  const stallMs = stall.max / 1e6;
  progress(`after a restart: open() ${(openMs / 1000).toFixed(1)} s, first query ${(firstQueryMs / 1000).toFixed(1)} s`);

  // -------------------------------------------------------------------------------------------------------------
  // Queries

  const { bm25, graph } = internals(library, PROJECT, KB);
  const candidates = Math.max(TOP_K * 4, 20); // as library.search asks each ranking for
  for (const q of makeQueries(WARMUP_QUERIES, 4)) {
    await library.search(PROJECT, KB, q.text, TOP_K, embedder);
    await library.search(PROJECT, KB, q.text, TOP_K, null);
  }
  // Each query goes through the library (hybrid, then lexical) and through the bare parts, one after the other, in an
  // order that turns with each query, so that all of them run under the same machine load and each is first (cold)
  // as often as the others.
  const hybrid: number[] = [];
  const lexical: number[] = [];
  const queryEmbed: number[] = [];
  const bm25Alone: number[] = [];
  const knnAlone: number[] = [];
  const countAlone: number[] = [];
  let hybridHits = 0;
  let lexicalHits = 0;
  const timed = async <T>(into: number[], fn: () => T | Promise<T>): Promise<T> => {
    const start = performance.now();
    const result = await fn();
    into.push(performance.now() - start);
    return result;
  };
  const steps: Array<(q: Query) => Promise<unknown>> = [
    async (q) => {
      const result = await timed(hybrid, () => library.search(PROJECT, KB, q.text, TOP_K, embedder));
      if (result.retrieval !== 'hybrid') throw new Error(`a query with the embedder was answered '${result.retrieval}'`);
      hybridHits += result.hits.length;
    },
    async (q) => {
      lexicalHits += (await timed(lexical, () => library.search(PROJECT, KB, q.text, TOP_K, null))).hits.length;
    },
    async (q) => {
      const [vector] = await timed(queryEmbed, () => embedder.embed([q.text], signal));
      const point = Array.from(vector);
      await timed(bm25Alone, () => bm25.search(q.text, candidates));
      await timed(knnAlone, () => graph.searchKnn(point, candidates));
      await timed(countAlone, () => library.count(PROJECT, KB));
    },
  ];
  const until = performance.now() + QUERY_CAP_SECONDS * 1000;
  for (const [i, q] of queries.entries()) {
    if (performance.now() > until) {
      progress(`queries stopped at the ${QUERY_CAP_SECONDS} s cap after ${i} of ${queries.length}`);
      break;
    }
    for (let step = 0; step < steps.length; step++) await steps[(i + step) % steps.length](q);
  }

  await library.close();
  await store.close();
  store = undefined;

  // -------------------------------------------------------------------------------------------------------------
  // Report

  const stats = (xs: number[]) => {
    const s = sortedOf(xs);
    return { p50: quantile(s, 0.5), p95: quantile(s, 0.95), p99: quantile(s, 0.99), n: s.length };
  };
  const byKind = (xs: number[], kind: Kind, lang?: Lang) =>
    stats(xs.filter((_, i) => queries[i].kind === kind && (lang === undefined || queries[i].lang === lang)));
  const row = (label: string, xs: number[]) => {
    const s = stats(xs);
    return `${label.padEnd(26)} ${ms(s.p50).padStart(9)} ${ms(s.p95).padStart(9)} ${ms(s.p99).padStart(9)}   (${s.n} queries)`;
  };

  console.log('');
  console.log(
    `corpus: ${int(chunks)} chunks in ${int(documents)} documents (${((100 * languages.en) / chunks).toFixed(0)}% English, ` +
      `${((100 * languages.ar) / chunks).toFixed(0)}% Arabic chunks), ${(characters / 1e6).toFixed(1)} M characters, ` +
      `chunks of ${meanChunk.toFixed(0)} characters on average`,
  );
  console.log(`model: ${values.model ?? 'generated tiny-embed GGUF'}, ${dimensions} dimensions, ${threads} threads`);
  if (capped) console.log(`ingestion stopped at its ${INGEST_CAP_SECONDS} s cap`);
  console.log('');
  console.log('ingestion');
  console.log(
    `  one input at a time        ${baselineRate.toFixed(0)} chunks/s  (library.add, embeddingContexts 1: every ${baselineEvery === 1 ? '' : `${baselineEvery}th `}document again, ${int(baselineChunks)} chunks, interleaved)`,
  );
  console.log(
    `  raw embedding (baseline)   ${rawRate.toFixed(0)} chunks/s  (the first ${EMBED_BATCH} chunks of every ${RAW_EVERY}th document, ${int(rawChunks)} chunks, interleaved)`,
  );
  console.log(
    `  raw, one at a time, 1 thread ${oneThreadRate.toFixed(0)} chunks/s  (the same chunks; the pool is ${(rawRate / oneThreadRate).toFixed(2)}x this)`,
  );
  console.log(`  embedding inside add()     ${(chunks / (ingestEmbedMs / 1000)).toFixed(0)} chunks/s`);
  console.log(
    `  library.add                ${ingestRate.toFixed(0)} chunks/s  (embeddingContexts ${contexts}) ratio ${(ingestRate / rawRate).toFixed(2)} of raw, ` +
      `${ingestRatio.toFixed(2)}x one at a time`,
  );
  console.log(
    `  of add()'s ${(addMs / 1000).toFixed(0)} s: embedding ${((100 * ingestEmbedMs) / addMs).toFixed(1)}%, ` +
      `the rest (chunking, lmdb, BM25, HNSW) ${((addMs - ingestEmbedMs) / chunks).toFixed(3)} ms per chunk ` +
      `(${overheadEarly.toFixed(3)} in the first tenth of documents, ${overheadLate.toFixed(3)} in the last)`,
  );
  console.log(`  chunking alone             ${(chunkMs / chunks).toFixed(3)} ms per chunk`);
  console.log(
    `  wall clock                 ${(ingestWallMs / 1000).toFixed(0)} s (generating the corpus ${(generateMs / 1000).toFixed(0)} s and the baselines ${((baselineAddMs + rawMs + oneThreadMs) / 1000).toFixed(0)} s of it); ` +
      `process RSS ${(rss / 1024 ** 2).toFixed(0)} MiB after ingesting`,
  );
  console.log(
    `  after a restart            open() ${(openMs / 1000).toFixed(2)} s, first query ${(firstQueryMs / 1000).toFixed(2)} s (open() builds BM25 from lmdb; ` +
      `the event loop blocked for ${(stallMs / 1000).toFixed(2)} s at a stretch)`,
  );
  console.log('');
  console.log(`queries (top_k ${TOP_K}, ${candidates} candidates per ranking)       p50       p95       p99`);
  console.log(row('  hybrid (search)', hybrid));
  console.log(row('  lexical (search, no model)', lexical));
  console.log(row('  query embedding alone', queryEmbed));
  console.log(row('  BM25 alone', bm25Alone));
  console.log(row('  HNSW searchKnn alone', knnAlone));
  console.log(row("  count() (the route's check)", countAlone));
  const parts = stats(queryEmbed).p50 + stats(bm25Alone).p50 + stats(knnAlone).p50;
  console.log(
    `  hybrid p50 ${ms(stats(hybrid).p50)} = parts' p50s ${ms(parts)} + ${ms(stats(hybrid).p50 - parts)} (fusion, lmdb reads of the hits)`,
  );
  console.log(`  hits returned: hybrid ${hybridHits}, lexical ${lexicalHits}`);
  console.log('');
  console.log(`by kind (p50 / p95)          hybrid                 lexical                BM25 alone`);
  for (const kind of KINDS) {
    for (const lang of ['en', 'ar'] as const) {
      const cell = (xs: number[]) => {
        const s = byKind(xs, kind, lang);
        return `${ms(s.p50)} / ${ms(s.p95)}`.padEnd(22);
      };
      console.log(`  ${`${kind} ${lang}`.padEnd(26)} ${cell(hybrid)} ${cell(lexical)} ${cell(bm25Alone)}`);
    }
  }
  console.log('');
  const hybridP95 = stats(hybrid).p95;
  console.log(
    `goal: hybrid query p95 < ${GOAL_P95_MS} ms (excluding the chat answer): ${ms(hybridP95)}, ${hybridP95 < GOAL_P95_MS ? 'met' : 'NOT met'}`,
  );
  const lexicalP95 = stats(lexical).p95;
  console.log(
    `      lexical query p95 < ${GOAL_P95_MS} ms:                            ${ms(lexicalP95)}, ${lexicalP95 < GOAL_P95_MS ? 'met' : 'NOT met'}`,
  );
  console.log(
    `      ingestion ≥ ${GOAL_INGEST_RATIO}x one input at a time:                    ${ingestRatio.toFixed(2)}x, ${ingestRatio >= GOAL_INGEST_RATIO ? 'met' : 'NOT met'}`,
  );
  const percentiles = (xs: number[]) => {
    const { p50, p95, p99 } = stats(xs);
    return { p50, p95, p99 };
  };
  appendResult(
    'documents',
    { chunks: targetChunks, queries: queryCount, model: values.model ?? null, contexts, baselineEvery },
    {
      corpus: { chunks, documents, meanChunkCharacters: meanChunk },
      dimensions,
      threads,
      ingestionCapped: capped,
      ingestion: {
        rawEmbeddingChunksPerSecond: rawRate,
        rawOneAtATimeOneThreadChunksPerSecond: oneThreadRate,
        addChunksPerSecond: ingestRate,
        oneAtATimeAddChunksPerSecond: baselineRate,
        oneAtATimeChunks: baselineChunks,
        overOneAtATime: ingestRatio,
        addOverRaw: ingestRate / rawRate,
        embeddingShareOfAdd: ingestEmbedMs / addMs,
        restOfAddMsPerChunk: (addMs - ingestEmbedMs) / chunks,
        chunkingMsPerChunk: chunkMs / chunks,
        wallSeconds: ingestWallMs / 1000,
        rssMiB: rss / 1024 ** 2,
      },
      restart: { openSeconds: openMs / 1000, firstQuerySeconds: firstQueryMs / 1000, longestBlockSeconds: stallMs / 1000 },
      queriesMs: {
        hybrid: percentiles(hybrid),
        lexical: percentiles(lexical),
        queryEmbedding: percentiles(queryEmbed),
        bm25: percentiles(bm25Alone),
        hnsw: percentiles(knnAlone),
        count: percentiles(countAlone),
      },
      goals: {
        hybridP95Under30ms: hybridP95 < GOAL_P95_MS,
        lexicalP95Under30ms: lexicalP95 < GOAL_P95_MS,
        ingestion3xOneAtATime: ingestRatio >= GOAL_INGEST_RATIO,
      },
    },
  );
} finally {
  await store?.close();
  await engine?.close();
  await baselineEngine?.close();
  await oneThreadEngine?.close();
  rmSync(work, { recursive: true, force: true });
}
process.exit(0);
