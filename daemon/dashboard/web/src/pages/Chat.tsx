// The chat app. It calls /v1 exactly as an API client does, with a key bound to this session, so scrubbing, limits
// and the audit log apply to it too. Each message of the user is shown as the model received it, redacted values
// marked. Answers stream in; every message sets its own direction (dir="auto"), so Arabic reads right to left.
import { useEffect, useRef, useState } from 'preact/hooks';
import { dash, v1 } from '../api.js';
import { ErrorNote, messageOf } from '../components.js';
import { t } from '../i18n.js';

interface Message {
  role: 'user' | 'assistant';
  content: string;
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

export function ChatPage() {
  const [key, setKey] = useState<string | null>(null);
  const [models, setModels] = useState<string[]>([]);
  const [model, setModel] = useState('');
  const [messages, setMessages] = useState<Message[]>([]);
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  const input = useRef<HTMLTextAreaElement>(null);

  useEffect(() => {
    (async () => {
      const { secret } = await dash<{ secret: string }>('POST', '/chat-key');
      setKey(secret);
      const [listed, overview] = await Promise.all([
        v1('/models', secret).then((r) => r.json() as Promise<{ data: Array<{ id: string }> }>),
        dash<{ health: { models: Array<{ id: string; capability: string }> } }>('GET', '/overview'),
      ]);
      const chat = new Set(overview.health.models.filter((m) => m.capability === 'chat').map((m) => m.id));
      const ids = listed.data.map((m) => m.id).filter((id) => chat.has(id));
      setModels(ids);
      setModel(ids[0] ?? '');
    })().catch((err) => setError(messageOf(err)));
  }, []);

  async function send(event: Event) {
    event.preventDefault();
    const text = input.current?.value.trim() ?? '';
    if (!text || !key || !model || busy) return;
    setError(null);
    setBusy(true);
    const history: Message[] = [...messages, { role: 'user', content: text }];
    try {
      const preview = await dash<{ texts: string[]; redactions: Record<string, number> }>('POST', '/scrub', {
        texts: history.filter((m) => m.role === 'user').map((m) => m.content),
      });
      const sentAs = preview.texts.at(-1) ?? text;
      const redacted = (sentAs.match(new RegExp(PLACEHOLDER.source, 'g')) ?? []).length;
      history[history.length - 1] = { role: 'user', content: text, sentAs, redacted };
      setMessages([...history, { role: 'assistant', content: '' }]);
      if (input.current) input.current.value = '';
      const res = await v1('/chat/completions', key, {
        method: 'POST',
        json: { model, stream: true, max_tokens: 512, messages: history.map((m) => ({ role: m.role, content: m.content })) },
      });
      let answer = '';
      let leaf: string | undefined;
      let failed: string | null = null;
      await readEvents(
        res.body!,
        (data) => {
          if (data === '[DONE]') return;
          const chunk = JSON.parse(data) as { choices?: Array<{ delta?: { content?: string } }>; error?: { message: string } };
          if (chunk.error) failed = chunk.error.message;
          const piece = chunk.choices?.[0]?.delta?.content;
          if (piece) {
            answer += piece;
            setMessages([...history, { role: 'assistant', content: answer }]);
          }
        },
        (comment) => {
          const m = /^x-audit-leaf (\d+)$/.exec(comment);
          if (m) leaf = m[1];
        },
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
      <label>
        {t('chat.model')}
        <select value={model} onChange={(e) => setModel(e.currentTarget.value)} data-testid="model-select">
          {models.map((id) => (
            <option value={id} key={id}>
              {id}
            </option>
          ))}
        </select>
      </label>
      {key && models.length === 0 && <p>{t('chat.noModels')}</p>}
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
            {m.leaf && <small class="leaf">{t('chat.auditLeaf', { leaf: m.leaf })}</small>}
          </li>
        ))}
      </ol>
      <ErrorNote error={error} />
      <form onSubmit={(e) => void send(e)} class="composer">
        <label for="prompt" class="visually-hidden">
          {t('chat.prompt')}
        </label>
        <textarea
          id="prompt"
          ref={input}
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
        <button type="submit" class="primary" disabled={busy || !model}>
          {t('chat.send')}
        </button>
      </form>
    </main>
  );
}
