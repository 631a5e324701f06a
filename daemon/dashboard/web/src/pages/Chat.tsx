// The chat app. It calls /v1 exactly as an API client does, with a key bound to this session, so scrubbing, limits
// and the audit log apply to it too. Each message of the user is shown as the model received it, redacted values
// marked. Answers stream in; every message sets its own direction (dir="auto"), so Arabic reads right to left.
import type { RefObject } from 'preact';
import { useEffect, useRef, useState } from 'preact/hooks';
import { dash, v1, type Session } from '../api.js';
import { ErrorNote, ProjectSelect, messageOf, useProjects } from '../components.js';
import { t } from '../i18n.js';

interface Citation {
  index: number;
  filename: string | null;
  chunk: number;
  text: string;
}

interface Message {
  role: 'user' | 'assistant';
  content: string;
  /** For an answer from the knowledge base: the passages it cites. */
  citations?: Citation[];
  /** What the model received, for the user's messages. */
  sentAs?: string;
  redacted?: number;
  leaf?: string;
}

const PLACEHOLDER = /(\[(?:NATIONAL_ID|IQAMA|IBAN|CARD)(?:_\d+)?\])/;

function Redacted(props: { text: string }) {
  return (
    <>
      {props.text.split(PLACEHOLDER).map((part, i) =>
        i % 2 === 1 ? (
          <mark class="redacted" key={i} title={t('chat.redactedValue')}>
            {part}
          </mark>
        ) : (
          part
        ),
      )}
    </>
  );
}

/** Reads an SSE body, calling `onData` with each `data:` payload and `onComment` with each comment line. */
async function readEvents(body: ReadableStream<Uint8Array>, onData: (data: string) => void, onComment: (text: string) => void) {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buffer = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    let end: number;
    while ((end = buffer.indexOf('\n\n')) >= 0) {
      const event = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      for (const line of event.split('\n')) {
        if (line.startsWith('data: ')) onData(line.slice(6));
        else if (line.startsWith(':')) onComment(line.slice(1).trim());
      }
    }
  }
}

/** The chat app's key for the chosen project, and the models it may use: chat models, and a transcriber for voice. */
function useChatKey(project: string, onError: (message: string) => void) {
  const [key, setKey] = useState<string | null>(null);
  const [models, setModels] = useState<string[]>([]);
  const [model, setModel] = useState('');
  const [transcriber, setTranscriber] = useState<string | null>(null);
  // The chat app's key is for one project: its calls count there, and its documents live there.
  useEffect(() => {
    if (!project) return;
    (async () => {
      const { secret } = await dash<{ secret: string }>('POST', '/chat-key', { project });
      setKey(secret);
      const [listed, overview] = await Promise.all([
        v1('/models', secret).then((r) => r.json() as Promise<{ data: Array<{ id: string }> }>),
        dash<{ health: { models: Array<{ id: string; capability: string }> } }>('GET', '/overview'),
      ]);
      const ofCapability = (capability: string) => {
        const ids = new Set(overview.health.models.filter((m) => m.capability === capability).map((m) => m.id));
        return listed.data.map((m) => m.id).filter((id) => ids.has(id));
      };
      const ids = ofCapability('chat');
      setModels(ids);
      setModel(ids[0] ?? '');
      setTranscriber(ofCapability('transcription')[0] ?? null);
    })().catch((err) => onError(messageOf(err)));
  }, [project]);
  return { key, models, model, setModel, transcriber };
}

/** The user's newest message as the model receives it: scrubbed by the server (with the ones before it), its redacted values counted. */
async function scrubbed(history: Message[], text: string): Promise<Message> {
  const preview = await dash<{ texts: string[]; redactions: Record<string, number> }>('POST', '/scrub', {
    texts: history.filter((m) => m.role === 'user').map((m) => m.content),
  });
  const sentAs = preview.texts.at(-1) ?? text;
  const redacted = (sentAs.match(new RegExp(PLACEHOLDER.source, 'g')) ?? []).length;
  return { role: 'user', content: text, sentAs, redacted };
}

/** The knowledge base's answer to `text`, with the passages it cites. */
async function documentAnswer(key: string, knowledgeBase: string, text: string, model: string): Promise<Message> {
  const res = await v1('/documents/query', key, { method: 'POST', json: { knowledge_base: knowledgeBase, query: text, model } });
  const result = (await res.json()) as { answer: string | null; citations: Citation[] };
  const leaf = res.headers.get('x-audit-leaf');
  return { role: 'assistant', content: result.answer ?? t('chat.passagesOnly'), citations: result.citations, ...(leaf ? { leaf } : {}) };
}

/** Reads a streamed chat completion, calling `onAnswer` with the answer so far at each new piece of it. */
async function streamAnswer(
  body: ReadableStream<Uint8Array>,
  onAnswer: (answer: string) => void,
): Promise<{ answer: string; leaf: string | undefined; failed: string | null }> {
  let answer = '';
  let leaf: string | undefined;
  let failed: string | null = null;
  await readEvents(
    body,
    (data) => {
      if (data === '[DONE]') return;
      const chunk = JSON.parse(data) as { choices?: Array<{ delta?: { content?: string } }>; error?: { message: string } };
      if (chunk.error) failed = chunk.error.message;
      const piece = chunk.choices?.[0]?.delta?.content;
      if (piece) {
        answer += piece;
        onAnswer(answer);
      }
    },
    (comment) => {
      const m = /^x-audit-leaf (\d+)$/.exec(comment);
      if (m) leaf = m[1];
    },
  );
  return { answer, leaf, failed };
}

/** Speaking into the prompt: records while on, then has the transcriber write what was said into the prompt. */
function useVoice(
  key: string | null,
  transcriber: string | null,
  input: RefObject<HTMLTextAreaElement | null>,
  setError: (error: string | null) => void,
) {
  const [recording, setRecording] = useState<MediaRecorder | null>(null);
  const [voiceStatus, setVoiceStatus] = useState<string | null>(null);

  async function toggleRecording() {
    if (recording) {
      recording.stop();
      return;
    }
    if (!key || !transcriber) return;
    setError(null);
    try {
      const stream = await navigator.mediaDevices.getUserMedia({ audio: true });
      const recorder = new MediaRecorder(stream);
      const chunks: Blob[] = [];
      recorder.ondataavailable = (e) => chunks.push(e.data);
      recorder.onstop = () => {
        stream.getTracks().forEach((track) => track.stop());
        setRecording(null);
        setVoiceStatus(t('chat.transcribing'));
        const body = new FormData();
        body.set('model', transcriber);
        body.set('file', new Blob(chunks, { type: recorder.mimeType }), 'speech.webm');
        v1('/audio/transcriptions', key, { method: 'POST', body })
          .then((res) => res.json() as Promise<{ text: string }>)
          .then(({ text }) => {
            if (input.current) input.current.value = `${input.current.value}${input.current.value ? ' ' : ''}${text.trim()}`;
            setVoiceStatus(t('chat.transcribed'));
            input.current?.focus();
          })
          .catch((err) => {
            setVoiceStatus(null);
            setError(messageOf(err));
          });
      };
      recorder.start();
      setRecording(recorder);
      setVoiceStatus(t('chat.recording'));
    } catch (err) {
      setError(messageOf(err));
    }
  }

  return { recording, voiceStatus, toggleRecording };
}

export function ChatPage(props: { session: Session }) {
  const [messages, setMessages] = useState<Message[]>([]);
  const [error, setError] = useState<string | null>(null);
  const { projects, project, setProject } = useProjects(setError);
  const { key, models, model, setModel, transcriber } = useChatKey(project, setError);
  const [busy, setBusy] = useState(false);
  const [knowledgeBase, setKnowledgeBase] = useState('my-documents');
  const [askDocuments, setAskDocuments] = useState(false);
  const input = useRef<HTMLTextAreaElement>(null);
  const { recording, voiceStatus, toggleRecording } = useVoice(key, transcriber, input, setError);

  async function send(event: Event) {
    event.preventDefault();
    const text = input.current?.value.trim() ?? '';
    if (!text || !key || !model || busy) return;
    setError(null);
    setBusy(true);
    const history: Message[] = [...messages, { role: 'user', content: text }];
    try {
      history[history.length - 1] = await scrubbed(history, text);
      setMessages([...history, { role: 'assistant', content: '' }]);
      if (input.current) input.current.value = '';
      if (askDocuments) {
        setMessages([...history, await documentAnswer(key, knowledgeBase, text, model)]);
        return;
      }
      const res = await v1('/chat/completions', key, {
        method: 'POST',
        json: { model, stream: true, max_tokens: 512, messages: history.map((m) => ({ role: m.role, content: m.content })) },
      });
      const { answer, leaf, failed } = await streamAnswer(res.body!, (soFar) =>
        setMessages([...history, { role: 'assistant', content: soFar }]),
      );
      setMessages([...history, { role: 'assistant', content: answer, ...(leaf ? { leaf } : {}) }]);
      if (failed) setError(failed);
    } catch (err) {
      setMessages(history);
      setError(messageOf(err));
    } finally {
      setBusy(false);
      input.current?.focus();
    }
  }

  return (
    <main id="main" class="chat">
      <h1>{t('chat.title')}</h1>
      <div class="row">
        <ProjectSelect projects={projects} project={project} onChange={setProject} testId="chat-project" />
        <ModelSelect models={models} model={model} onChange={setModel} />
      </div>
      {projects.length === 0 && <p>{t('chat.noProject')}</p>}
      {key && models.length === 0 && (
        <p data-testid="no-models">
          {t('chat.noModels')} {props.session.user?.role === 'admin' ? t('chat.noModelsAdmin') : t('chat.noModelsMember')}
        </p>
      )}
      <Documents
        chatKey={key}
        knowledgeBase={knowledgeBase}
        setKnowledgeBase={setKnowledgeBase}
        askDocuments={askDocuments}
        setAskDocuments={setAskDocuments}
        setError={setError}
      />
      <MessageList messages={messages} busy={busy} />
      <ErrorNote error={error} />
      <Composer
        inputRef={input}
        onSend={(e) => void send(e)}
        onToggleRecording={() => void toggleRecording()}
        transcriber={transcriber}
        recording={recording !== null}
        sendDisabled={busy || !model}
      />
      <p class="hint" role="status" data-testid="voice-status">
        {voiceStatus}
      </p>
    </main>
  );
}

function ModelSelect(props: { models: string[]; model: string; onChange: (model: string) => void }) {
  return (
    <label>
      {t('chat.model')}
      <select value={props.model} onChange={(e) => props.onChange(e.currentTarget.value)} data-testid="model-select">
        {props.models.map((id) => (
          <option value={id} key={id}>
            {id}
          </option>
        ))}
      </select>
    </label>
  );
}

/** The knowledge base the chat can ask: uploading documents into it, and whether the next question goes to it. */
function Documents(props: {
  chatKey: string | null;
  knowledgeBase: string;
  setKnowledgeBase: (name: string) => void;
  askDocuments: boolean;
  setAskDocuments: (ask: boolean) => void;
  setError: (error: string | null) => void;
}) {
  const { knowledgeBase, setError } = props;
  const [uploads, setUploads] = useState<string[]>([]);

  async function upload(event: Event) {
    event.preventDefault();
    const form = event.currentTarget as HTMLFormElement;
    const file = (form.elements.namedItem('file') as HTMLInputElement).files?.[0];
    if (!file || !props.chatKey) return;
    setError(null);
    const body = new FormData();
    body.set('knowledge_base', knowledgeBase);
    body.set('file', file, file.name);
    try {
      const res = await v1('/documents', props.chatKey, { method: 'POST', body });
      const doc = (await res.json()) as { filename: string; chunks: number; redactions: Record<string, number> };
      const redacted = Object.values(doc.redactions).reduce((a, n) => a + n, 0);
      const indexed = t('chat.uploaded', { name: doc.filename, count: doc.chunks });
      setUploads((list) => [...list, t('chat.uploadedBoth', { indexed, redacted: t('chat.uploadedRedacted', { count: redacted }) })]);
      props.setAskDocuments(true);
      form.reset();
    } catch (err) {
      setError(messageOf(err));
    }
  }

  return (
    <details class="documents">
      <summary>{t('chat.documents')}</summary>
      <form class="inline" onSubmit={(e) => void upload(e)} data-testid="upload-form">
        <label>
          {t('chat.knowledgeBase')}
          <input
            value={knowledgeBase}
            onInput={(e) => props.setKnowledgeBase(e.currentTarget.value)}
            required
            pattern="[A-Za-z0-9._\-]{1,64}"
            dir="ltr"
          />
        </label>
        <label>
          {t('chat.file')}
          <input name="file" type="file" accept=".txt,.md,.markdown,.html,.htm,.pdf" required />
        </label>
        <button type="submit">{t('chat.upload')}</button>
      </form>
      <ul aria-live="polite" data-testid="uploads">
        {uploads.map((u, i) => (
          <li key={i}>{u}</li>
        ))}
      </ul>
      <label class="check">
        <input type="checkbox" checked={props.askDocuments} onChange={(e) => props.setAskDocuments(e.currentTarget.checked)} />
        {t('chat.askDocuments', { name: knowledgeBase })}
      </label>
    </details>
  );
}

/** The conversation: each user message as the model received it (redacted values marked), answers with their citations and audit leaf. */
function MessageList(props: { messages: Message[]; busy: boolean }) {
  const { messages, busy } = props;
  return (
    <ol class="messages" aria-live="polite" data-testid="messages">
      {messages.map((m, i) => (
        <li class={`message ${m.role}`} key={i} data-role={m.role}>
          <span class="who">{m.role === 'user' ? t('chat.you') : t('chat.assistant')}</span>
          <p dir="auto">{m.content || (busy && i === messages.length - 1 ? '…' : '')}</p>
          {m.sentAs !== undefined && m.redacted ? (
            <p class="sent-as" dir="auto" data-testid="sent-as">
              <span class="label">{t('chat.sentAs', { count: m.redacted })}</span> <Redacted text={m.sentAs} />
            </p>
          ) : null}
          {m.citations && m.citations.length > 0 && (
            <ol class="citations" data-testid="citations">
              {m.citations.map((c) => (
                <li key={c.index} value={c.index} dir="auto">
                  <strong dir="ltr">{`[${c.index}] ${c.filename ?? ''} §${c.chunk}`}</strong> <Redacted text={c.text.slice(0, 240)} />
                </li>
              ))}
            </ol>
          )}
          {m.leaf && <small class="leaf">{t('chat.auditLeaf', { leaf: m.leaf })}</small>}
        </li>
      ))}
    </ol>
  );
}

/** The prompt (Enter sends, Shift+Enter breaks the line), the voice button and the send button. */
function Composer(props: {
  inputRef: RefObject<HTMLTextAreaElement | null>;
  onSend: (event: Event) => void;
  onToggleRecording: () => void;
  transcriber: string | null;
  recording: boolean;
  sendDisabled: boolean;
}) {
  const { transcriber } = props;
  return (
    <form onSubmit={props.onSend} class="composer">
      <label for="prompt" class="visually-hidden">
        {t('chat.prompt')}
      </label>
      <textarea
        id="prompt"
        ref={props.inputRef}
        dir="auto"
        rows={3}
        placeholder={t('chat.placeholder')}
        onKeyDown={(e) => {
          if (e.key === 'Enter' && !e.shiftKey) {
            e.preventDefault();
            (e.currentTarget.form as HTMLFormElement).requestSubmit();
          }
        }}
      />
      <button
        type="button"
        onClick={props.onToggleRecording}
        disabled={!transcriber}
        aria-pressed={props.recording}
        title={transcriber ? undefined : t('chat.noTranscriber')}
        data-testid="voice"
      >
        {props.recording ? t('chat.stop') : t('chat.speak')}
      </button>
      <button type="submit" class="primary" disabled={props.sendDisabled}>
        {t('chat.send')}
      </button>
    </form>
  );
}
