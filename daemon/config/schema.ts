// The configuration file's JSON Schema. Descriptions here are the source for docs/config.md; a test checks that
// every key below is documented there.

export const POSTURES = ['device', 'appliance', 'cloud', 'frontier'] as const;
export type Posture = (typeof POSTURES)[number];

export const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];

export interface Config {
  posture: Posture;
  region: string;
  listen: { host?: string; port: number };
  tls?: { cert: string; key: string };
  dataDir: string;
  /** Where the state replicas share lives: this machine's lmdb, or PostgreSQL (cloud, frontier). */
  store: 'lmdb' | 'postgres';
  postgres?: { url: string; passwordFile?: string; poolSize?: number; timeoutMs?: number };
  modelsDir?: string;
  manifest?: string;
  limits: {
    bodyBytes: number;
    maxInFlight: number;
    /** Fractions of maxInFlight one key, and one project, may hold (never fewer places than minShare). */
    keyShare: number;
    projectShare: number;
    accountShare: number;
    minShare: number;
    defaultRpm: number;
    defaultTpm: number;
    /** Limits of all a project's keys together (cloud, frontier), unless the operator set the project's own. */
    defaultProjectRpm: number;
    defaultProjectTpm: number;
    /** Caps on what a dashboard member may create (administrators are not capped). */
    maxProjectsPerAccount: number;
    maxKeysPerProject: number;
    store: 'memory' | 'redis';
    redis?: { url: string; passwordFile?: string; keyPrefix?: string; timeoutMs?: number };
    defaultPlan?: string;
  };
  /** Named plans (cloud, frontier): the limits of a key on the plan that has none of its own. */
  plans: Record<string, { rpm: number; tpm: number; weight?: number; priority?: boolean }>;
  /** How each model's waiting calls are ordered, and each project's share (engines/slots.ts). */
  scheduling: { policy: 'fair' | 'fifo'; projectWeights: Record<string, number> };
  timeouts: {
    requestMs: number;
    bodyIdleMs: number;
    readerIdleMs: number;
    keepAliveMs: number;
    shutdownGraceMs: number;
  };
  log: { level: LogLevel; requests: boolean };
  models: {
    load: 'boot' | 'on-demand';
    headroomBytes: number;
    parallel: number;
    /** Contexts each embeddings model embeds on at once. */
    embeddingContexts: number;
    queue: number;
    gpu: 'auto' | 'off';
    threads: number;
    /** Public keys (PEM files) whose signed models bundles this device imports. */
    bundleKeys: string[];
    /** How often the models dir is polled for files imported while the daemon runs; 0: only at boot. */
    rescanSeconds: number;
  };
  scrub: { output: boolean };
  speech: { maxUploadBytes: number; maxSeconds: number; ffmpeg: string };
  documents: {
    maxChunksPerDocument: number;
    maxDocumentsPerKnowledgeBase: number;
    maxUploadBytes: number;
    embeddingModel: string | null;
    /** How uploaded PDFs are read: in worker threads, each document within a time and a memory budget. */
    pdf: { workers: number; queue: number; timeoutMs: number; memoryMb: number };
  };
  images: { urlTtlSeconds: number };
  responses: { ttlSeconds: number };
  /** Files kept for the Batch API (/v1/files): their size, each project's room, how long they stay. */
  files: { maxBytes: number; maxBytesPerProject: number; ttlSeconds: number };
  /** Batches (/v1/batches): how many lines a file may have, how many lines run at once. */
  batches: { maxLines: number; parallel: number; maxOpenPerProject: number };
  usage: { billingDays: number };
  /**
   * The Prometheus text endpoint, on its own address (the internal management network): `prometheus` unset means on
   * for cloud and frontier, off for the sealed postures.
   */
  metrics: { prometheus?: boolean; listen: { host: string; port: number } };
  /** When the daemon raises an alert (daemon/alerts). */
  alerts: { checkpointLagSeconds: number; diskFreePercent: number; diskFullHours: number; egressHours: number };
  audit: {
    signer: 'tpm' | 'software';
    tcti: string;
    keyHandle: string;
    primaryHandle: string;
    attestationKeyHandle: string;
    endorsementPrimaryHandle: string;
    origin?: string;
    /** Where the write-ahead journal lives; default the data directory. */
    journalDir?: string;
    checkpointMs: number;
    heartbeatMs: number;
  };
  upstreams: UpstreamConfig[];
}

/** An OpenAI-compatible server this daemon routes some model ids to (a GPU rack's vLLM or llama.cpp server). */
export interface UpstreamConfig {
  name: string;
  baseUrl: string;
  apiKeyFile?: string;
  connections?: number;
  timeoutMs?: number;
  retries?: number;
  healthIntervalMs?: number;
  frontier?: boolean;
  models: UpstreamModelConfig[];
}

export interface UpstreamModelConfig {
  id: string;
  upstreamModel?: string;
  capability: 'chat' | 'embeddings' | 'transcription' | 'image';
  contextTokens?: number;
  ownedBy?: string;
  shortenable?: boolean;
}

const positiveInt = (description: string, minimum = 1, maximum = Number.MAX_SAFE_INTEGER) =>
  ({ type: 'integer', minimum, maximum, description }) as const;

const share = (description: string) => ({ type: 'number', exclusiveMinimum: 0, maximum: 1, description }) as const;

export const configSchema = {
  $id: 'sovereign-config',
  type: 'object',
  additionalProperties: false,
  properties: {
    $schema: { type: 'string', description: 'Ignored; lets editors find a schema.' },
    posture: { enum: POSTURES, description: 'Deployment posture: device, appliance, cloud or frontier.' },
    region: {
      type: 'string',
      pattern: '^[a-z0-9][a-z0-9-]{0,62}$',
      description: 'Region sent in X-Region on every response, for example sa-riyadh-1.',
    },
    listen: {
      type: 'object',
      additionalProperties: false,
      properties: {
        host: { type: 'string', minLength: 1, description: 'Address to bind.' },
        port: positiveInt('TCP port to bind (0 picks a free port and logs it).', 0, 65535),
      },
    },
    tls: {
      type: 'object',
      additionalProperties: false,
      required: ['cert', 'key'],
      properties: {
        cert: { type: 'string', minLength: 1, description: 'PEM certificate chain file for HTTPS.' },
        key: { type: 'string', minLength: 1, description: 'PEM private key file for HTTPS.' },
      },
    },
    dataDir: { type: 'string', minLength: 1, description: 'State directory (databases, audit log).' },
    store: {
      enum: ['lmdb', 'postgres'],
      description:
        "Where projects, keys, accounts, sessions and usage live: in the data directory's lmdb (lmdb), or in PostgreSQL, shared by every replica (postgres; cloud and frontier only, see docs/scale-out.md).",
    },
    postgres: {
      type: 'object',
      additionalProperties: false,
      required: ['url'],
      description: 'The PostgreSQL database replicas share, when store is postgres.',
      properties: {
        url: {
          type: 'string',
          // No password before the host, nor as an option (pg reads '?password=' and '?sslpassword=' too).
          pattern: '^postgres(ql)?://[^\\s:@/?#]+@[^\\s@/?#]+/[^\\s@/?#]+(\\?(?!(ssl)?password=|[^#]*&(ssl)?password=)[^\\s@#]*)?$',
          description:
            "The database, e.g. postgres://sovereign@10.0.0.7:5432/sovereign (a user, a host and a database; TLS options such as '?sslmode=verify-full' may follow); the password goes in passwordFile, never here (nor as '?password=').",
        },
        passwordFile: {
          type: 'string',
          minLength: 1,
          description: "File holding the database user's password (read at start; never logged).",
        },
        poolSize: positiveInt('Connections each replica keeps to PostgreSQL for its changes (one more listens for notifications).', 1, 100),
        timeoutMs: positiveInt(
          'Time a PostgreSQL connection or statement may take before the call that needs it gets 503, in ms.',
          100,
          60_000,
        ),
      },
    },
    modelsDir: { type: 'string', minLength: 1, description: 'Directory holding model files.' },
    manifest: { type: 'string', minLength: 1, description: 'Path of models-manifest.json.' },
    limits: {
      type: 'object',
      additionalProperties: false,
      properties: {
        bodyBytes: positiveInt('Largest JSON request body accepted, in bytes.', 1024, 1024 * 1024 * 1024),
        maxInFlight: positiveInt('Concurrent /v1 calls before new ones get 503 server_overloaded.', 1, 100000),
        keyShare: share('Fraction of maxInFlight one key may hold; past it the key gets 429 while other keys are still admitted.'),
        projectShare: share('Fraction of maxInFlight the keys of one project may hold together; past it they get 429.'),
        accountShare: share('Fraction of maxInFlight the projects a dashboard member made may hold together; past it their keys get 429.'),
        minShare: positiveInt(
          'Places a key or a project may always hold, however small its fraction (never more than maxInFlight).',
          1,
          100000,
        ),
        defaultRpm: positiveInt('Requests per minute for a key that has no limit of its own (cloud, frontier).'),
        defaultTpm: positiveInt('Tokens per minute for a key that has no limit of its own (cloud, frontier).'),
        defaultProjectRpm: positiveInt(
          "Requests per minute of all a project's keys together, unless the operator set the project's own (cloud, frontier).",
        ),
        defaultProjectTpm: positiveInt(
          "Tokens per minute of all a project's keys together, unless the operator set the project's own (cloud, frontier).",
        ),
        maxProjectsPerAccount: positiveInt('Projects a dashboard member account may create (administrators are not capped).', 1, 100000),
        maxKeysPerProject: positiveInt(
          'Active keys a dashboard member may have in one project (administrators are not capped).',
          1,
          100000,
        ),
        defaultPlan: {
          type: 'string',
          minLength: 1,
          description: "The plan (a name in 'plans') of a key that has none; without it such a key gets defaultRpm and defaultTpm.",
        },
        store: {
          enum: ['memory', 'redis'],
          description: 'Where per-key limits are kept: in this process (memory), or in Redis, shared exactly by every replica (redis).',
        },
        redis: {
          type: 'object',
          additionalProperties: false,
          required: ['url'],
          properties: {
            url: {
              type: 'string',
              pattern: '^rediss?://[^\\s@?#]+$',
              description: 'The Redis server, e.g. redis://10.0.0.9:6379/0 (rediss:// for TLS); no credentials or query in it.',
            },
            passwordFile: { type: 'string', minLength: 1, description: 'File holding the Redis password (read at start; never logged).' },
            keyPrefix: { type: 'string', pattern: '^[A-Za-z0-9:_.-]{1,64}$', description: "Prefix of this deployment's keys in Redis." },
            timeoutMs: positiveInt('Time a limit decision may take in Redis before the call gets 503, in ms.', 10, 60_000),
          },
        },
      },
    },
    timeouts: {
      type: 'object',
      additionalProperties: false,
      properties: {
        requestMs: positiveInt('Time allowed to receive a whole request, headers and body, in ms.', 1000),
        bodyIdleMs: positiveInt(
          'Time a request body may go without a byte arriving before the call gets 408 and its connection closes, in ms.',
          100,
        ),
        readerIdleMs: positiveInt('Time an answer may wait on a client that reads none of it before the connection is closed, in ms.', 100),
        keepAliveMs: positiveInt('Idle time before a keep-alive connection is closed, in ms.', 1000),
        shutdownGraceMs: positiveInt('On SIGTERM, time allowed for in-flight calls to finish, in ms.', 100),
      },
    },
    models: {
      type: 'object',
      additionalProperties: false,
      properties: {
        load: { enum: ['boot', 'on-demand'], description: 'Load listed models at boot, or on their first call.' },
        headroomBytes: positiveInt('Memory kept free when deciding which models fit, in bytes.', 0),
        parallel: positiveInt('Calls one model serves at the same time (llama.cpp sequences).', 1, 64),
        embeddingContexts: positiveInt(
          'Contexts each embeddings model embeds on at once, each holding one input; also the calls it serves at once. 1 embeds one input at a time.',
          1,
          64,
        ),
        queue: positiveInt(
          'Calls that may wait per model before 503 server_overloaded: per project under the fair policy (scheduling.policy), in all under fifo.',
          0,
          10000,
        ),
        gpu: { enum: ['auto', 'off'], description: 'Use a GPU if node-llama-cpp finds one (auto), or never (off).' },
        threads: positiveInt('CPU threads for inference; 0 means every core the probe finds.', 0, 1024),
        rescanSeconds: positiveInt(
          'Seconds between looks at the models dir for models imported while the daemon runs (changes are also watched); 0 looks only at boot.',
          0,
          3600,
        ),
        bundleKeys: {
          type: 'array',
          maxItems: 32,
          items: { type: 'string', minLength: 1 },
          description: 'Public key files (PEM) of the senders whose signed models bundles this device imports.',
        },
      },
    },
    scrub: {
      type: 'object',
      additionalProperties: false,
      properties: {
        output: {
          type: 'boolean',
          description: "Scrub chat models' answers too (streamed with a short hold-back), not only what they are sent.",
        },
      },
    },
    speech: {
      type: 'object',
      additionalProperties: false,
      properties: {
        maxUploadBytes: positiveInt('Bytes of one audio upload; a larger one gets 413.', 1024, 1024 ** 3),
        maxSeconds: positiveInt('Seconds of audio one transcription may hold; a longer one gets 400.', 1, 24 * 3600),
        ffmpeg: { type: 'string', minLength: 1, description: 'The ffmpeg executable that decodes uploads (a name on PATH or a path).' },
      },
    },
    documents: {
      type: 'object',
      additionalProperties: false,
      properties: {
        maxChunksPerDocument: positiveInt('Chunks one document may make; a longer one gets 413.', 1, 1_000_000),
        maxDocumentsPerKnowledgeBase: positiveInt('Documents one knowledge base may hold; the next gets 400.', 1, 10_000_000),
        maxUploadBytes: positiveInt('Bytes of one uploaded file (multipart); a larger one gets 413.', 1024, 1024 ** 3),
        embeddingModel: {
          type: ['string', 'null'],
          minLength: 1,
          description: 'The embeddings model that indexes documents; null: the first one served, if any.',
        },
        pdf: {
          type: 'object',
          additionalProperties: false,
          properties: {
            workers: positiveInt('PDFs read at once, each in a worker thread of its own; 0: half the cores, 1 to 4.', 0, 64),
            queue: positiveInt('PDF uploads that may wait for a worker; the next gets 503 server_overloaded.', 0, 10_000),
            timeoutMs: positiveInt('Time one PDF may take to read, in ms; a slower one is stopped and gets 400.', 100, 3_600_000),
            // Below 256, pdf.js itself leaves a plain one-page PDF no room: every upload would get 413.
            memoryMb: positiveInt('Memory one PDF may take while it is read, in MiB; past it the upload gets 413.', 256, 65_536),
          },
        },
      },
    },
    plans: {
      type: 'object',
      description:
        'Named plans of the metered postures, e.g. {"starter": {"rpm": 60, "tpm": 100000}}: a key\'s plan gives its limits unless the key has its own.',
      propertyNames: { pattern: '^[a-z0-9][a-z0-9-]{0,31}$' },
      maxProperties: 256,
      additionalProperties: {
        type: 'object',
        additionalProperties: false,
        required: ['rpm', 'tpm'],
        properties: {
          rpm: positiveInt('Requests per minute of a key on the plan.'),
          tpm: positiveInt('Tokens per minute of a key on the plan.'),
          weight: {
            type: 'number',
            exclusiveMinimum: 0,
            maximum: 1000,
            description: "The share of a model's time the calls of a key on the plan count for, against other projects' (1).",
          },
          priority: {
            type: 'boolean',
            description: "Whether a key on the plan may ask for service_tier 'priority' (false: served at 'default').",
          },
        },
      },
    },
    scheduling: {
      type: 'object',
      additionalProperties: false,
      properties: {
        policy: {
          enum: ['fair', 'fifo'],
          description:
            "How each model's waiting calls are ordered: 'fair', weighted fair queueing across projects; 'fifo', one queue in arrival order (the daemon's former policy, for comparison).",
        },
        projectWeights: {
          type: 'object',
          description: "Projects' weights by name or id (default 1): a project's share of a model's time against the others'.",
          maxProperties: 10_000,
          additionalProperties: { type: 'number', exclusiveMinimum: 0, maximum: 1000 },
        },
      },
    },
    usage: {
      type: 'object',
      additionalProperties: false,
      properties: {
        billingDays: positiveInt("Days of per-key daily usage kept for billing ('sovereign usage export').", 1, 3660),
      },
    },
    metrics: {
      type: 'object',
      additionalProperties: false,
      properties: {
        prometheus: {
          type: 'boolean',
          description:
            'Serve the Prometheus text endpoint (GET /metrics) at metrics.listen. Default: on for cloud and frontier, off for device and appliance.',
        },
        listen: {
          type: 'object',
          additionalProperties: false,
          required: ['host', 'port'],
          properties: {
            host: { type: 'string', minLength: 1, description: 'The internal address /metrics is served on (never the API address).' },
            port: positiveInt('Its port (0: any free port).', 0, 65535),
          },
        },
      },
    },
    alerts: {
      type: 'object',
      additionalProperties: false,
      properties: {
        checkpointLagSeconds: positiveInt('Age of the newest audit checkpoint above which an alert is raised, in seconds.', 1, 7 * 86400),
        diskFreePercent: {
          type: 'number',
          minimum: 0,
          maximum: 100,
          description: 'Free space of the data disk, in percent, under which an alert is raised.',
        },
        diskFullHours: positiveInt('Hours until the data disk is full at its current rate under which an alert is raised.', 0, 100_000),
        egressHours: positiveInt('Hours an alert for a refused outbound attempt stays raised.', 1, 24 * 90),
      },
    },
    images: {
      type: 'object',
      additionalProperties: false,
      properties: {
        urlTtlSeconds: positiveInt(
          'How long an image answered as a url stays available at /v1/images/files/…, in seconds.',
          1,
          7 * 24 * 3600,
        ),
      },
    },
    responses: {
      type: 'object',
      additionalProperties: false,
      properties: {
        ttlSeconds: positiveInt(
          'How long a response made with store: true (/v1/responses) is kept for previous_response_id and GET, in seconds.',
          60,
          365 * 24 * 3600,
        ),
      },
    },
    files: {
      type: 'object',
      additionalProperties: false,
      properties: {
        maxBytes: positiveInt('Bytes of one file uploaded to /v1/files; a larger one gets 413.', 1024, 1024 * 1024 * 1024),
        maxBytesPerProject: positiveInt(
          "Bytes all of a project's files may hold together (batch inputs, outputs and errors); an upload past it gets 413.",
          1024,
        ),
        ttlSeconds: positiveInt(
          'How long a file (a batch input, output or error file) is kept before it is deleted, in seconds.',
          1,
          365 * 24 * 3600,
        ),
      },
    },
    batches: {
      type: 'object',
      additionalProperties: false,
      properties: {
        maxLines: positiveInt('Requests (lines) one batch input file may hold; a file with more gets 400 at upload.', 1, 1_000_000),
        parallel: positiveInt("Batch lines run at once, across every batch: each holds one of a model's slots.", 1, 8),
        maxOpenPerProject: positiveInt('Batches of one project that may be unfinished at once; the next gets 429.', 1, 1000),
      },
    },
    audit: {
      type: 'object',
      additionalProperties: false,
      properties: {
        signer: {
          enum: ['tpm', 'software'],
          description: 'What signs audit checkpoints: the TPM, or a software key in the data directory (every checkpoint then says so).',
        },
        tcti: { type: 'string', minLength: 1, description: 'How tpm2-tools reach the TPM (TCTI), e.g. device:/dev/tpmrm0.' },
        keyHandle: {
          type: 'string',
          pattern: '^0x81[0-9a-fA-F]{6}$',
          description: "Persistent TPM handle of the checkpoint signing key ('sovereign audit init-tpm' creates it).",
        },
        primaryHandle: {
          type: 'string',
          pattern: '^0x81[0-9a-fA-F]{6}$',
          description: 'Persistent TPM handle of the primary key the signing key lives under.',
        },
        attestationKeyHandle: {
          type: 'string',
          pattern: '^0x81[0-9a-fA-F]{6}$',
          description: "Persistent TPM handle of the attestation key whose quotes bind each checkpoint to the TPM's clock.",
        },
        endorsementPrimaryHandle: {
          type: 'string',
          pattern: '^0x81[0-9a-fA-F]{6}$',
          description: 'Persistent TPM handle of the endorsement-hierarchy primary the attestation key lives under.',
        },
        origin: {
          type: 'string',
          pattern: '^[\\x21-\\x7e]+$',
          description:
            'The checkpoint origin line (no spaces); default sovereign/<region>, or with store postgres sovereign/<region>/<host name> (each replica keeps a log of its own, and two logs never share an origin).',
        },
        journalDir: {
          type: 'string',
          minLength: 1,
          description:
            "Directory of the audit log's write-ahead journal (default: the data directory); a device of its own keeps its flushes from waiting behind the database's.",
        },
        checkpointMs: positiveInt('How often a checkpoint is signed while the log grows, in ms.', 200, 3_600_000),
        heartbeatMs: positiveInt('Longest time without a checkpoint while the log does not grow, in ms.', 1000, 86_400_000),
      },
    },
    upstreams: {
      type: 'array',
      maxItems: 64,
      description: 'OpenAI-compatible servers some model ids are routed to (see docs/upstreams.md).',
      items: {
        type: 'object',
        additionalProperties: false,
        required: ['name', 'baseUrl', 'models'],
        properties: {
          name: {
            type: 'string',
            pattern: '^[a-z0-9][a-z0-9-]{0,62}$',
            description: 'Name of the upstream in logs and health.',
          },
          baseUrl: {
            type: 'string',
            pattern: '^https?://[^\\s]+$',
            description: "The upstream's OpenAI base URL, ending in /v1, e.g. http://10.0.0.5:8000/v1.",
          },
          apiKeyFile: {
            type: 'string',
            minLength: 1,
            description: 'File holding the bearer key the upstream expects (read at start; never logged).',
          },
          connections: positiveInt('Keep-alive connections kept open to the upstream.', 1, 4096),
          timeoutMs: positiveInt('Time allowed for the upstream to start answering, and between streamed pieces, in ms.', 100),
          retries: positiveInt(
            'Further tries of a call that failed before the upstream sent any answer (no connection, reset, 502/503/504).',
            0,
            5,
          ),
          frontier: {
            type: 'boolean',
            description:
              'The upstream is a frontier provider outside the sovereign boundary (frontier posture only): its models are labelled non-sovereign and every call to it is marked in the audit log.',
          },
          healthIntervalMs: positiveInt(
            "How often the upstream's GET /v1/models is checked, in ms; its models are listed only while it answers and names them.",
            200,
            3_600_000,
          ),
          models: {
            type: 'array',
            minItems: 1,
            maxItems: 1024,
            description: 'Model ids served through this upstream.',
            items: {
              type: 'object',
              additionalProperties: false,
              required: ['id', 'capability'],
              properties: {
                id: {
                  type: 'string',
                  pattern: '^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$',
                  description: 'The model id clients use here (listed by /v1/models).',
                },
                upstreamModel: {
                  type: 'string',
                  minLength: 1,
                  maxLength: 256,
                  description: 'The model name the upstream knows it by; default: the same as id.',
                },
                capability: {
                  enum: ['chat', 'embeddings', 'transcription', 'image'],
                  description: 'What the model does: chat, embeddings, transcription or image (generation).',
                },
                contextTokens: positiveInt('Context the upstream serves the model with, in tokens (bounds token reservations).'),
                ownedBy: { type: 'string', minLength: 1, maxLength: 128, description: "The model list's owned_by." },
                shortenable: {
                  type: 'boolean',
                  description: "Embeddings only: the model's vectors may be cut to fewer 'dimensions' (a Matryoshka-trained model).",
                },
              },
            },
          },
        },
      },
    },
    log: {
      type: 'object',
      additionalProperties: false,
      properties: {
        level: { enum: LOG_LEVELS, description: 'Log level.' },
        requests: { type: 'boolean', description: 'Log one line per completed request.' },
      },
    },
  },
} as const;
