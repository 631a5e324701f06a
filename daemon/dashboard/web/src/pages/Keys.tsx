// Projects and their keys: create (the secret shown once, with a copy button), rotate with an optional grace
// period, revoke, and edit the key's own rate limits. Destructive actions ask first.
import { useEffect, useState } from 'preact/hooks';
import { dash, type Key, type Project, type Session } from '../api.js';
import { Confirm, ErrorNote, Modal, ProjectSelect, field, messageOf, useProjects } from '../components.js';
import { formatDate, formatNumber, t } from '../i18n.js';

type Pending = { kind: 'rotate' | 'revoke' | 'limits'; key: Key } | null;

/** The create form's name field, which the empty list's button sends the user to. */
const KEY_NAME = 'new-key-name';

function numberOrNull(form: FormData, name: string): number | null {
  const text = field(form, name).trim();
  return text === '' ? null : Number(text);
}

/** The body of POST /keys from the create form: the name if one is given, and the key's own limits where they are metered. */
function newKeyBody(data: FormData, project: string, metered: boolean): Record<string, unknown> {
  const body: Record<string, unknown> = { project };
  if (field(data, 'name').trim()) body.name = field(data, 'name').trim();
  if (metered) {
    body.rpm = numberOrNull(data, 'rpm');
    body.tpm = numberOrNull(data, 'tpm');
  }
  return body;
}

/** Runs `work` and shows what failed of it (clearing the previous failure first). */
async function reporting(setError: (error: string | null) => void, work: () => Promise<void>) {
  setError(null);
  try {
    await work();
  } catch (err) {
    setError(messageOf(err));
  }
}

/** The chosen project's keys, loaded again whenever another project is chosen. */
function useKeys(project: string, onError: (message: string) => void) {
  const [keys, setKeys] = useState<Key[]>([]);
  async function loadKeys() {
    if (!project) return setKeys([]);
    const { data } = await dash<{ data: Key[] }>('GET', `/keys?project=${encodeURIComponent(project)}`);
    setKeys(data);
  }
  useEffect(() => {
    loadKeys().catch((err) => onError(messageOf(err)));
  }, [project]);
  return { keys, loadKeys };
}

export function KeysPage(props: { session: Session }) {
  const metered = props.session.posture === 'cloud' || props.session.posture === 'frontier';
  const [error, setError] = useState<string | null>(null);
  const { projects, project, setProject, reload: loadProjects } = useProjects(setError);
  const { keys, loadKeys } = useKeys(project, setError);
  const [secret, setSecret] = useState<{ key: Key; secret: string } | null>(null);
  const [pending, setPending] = useState<Pending>(null);
  const [copied, setCopied] = useState(false);
  const act = (work: () => Promise<void>) => reporting(setError, work);

  const createKey = (event: Event) =>
    act(async () => {
      event.preventDefault();
      const form = event.currentTarget as HTMLFormElement;
      const body = newKeyBody(new FormData(form), project, metered);
      setCopied(false);
      setSecret(await dash<{ key: Key; secret: string }>('POST', '/keys', body));
      form.reset();
      await loadKeys();
    });

  const rotate = (key: Key, graceSeconds: number) =>
    act(async () => {
      setPending(null);
      setCopied(false);
      setSecret(await dash<{ key: Key; secret: string }>('POST', `/keys/${key.id}/rotate`, { graceSeconds }));
      await loadKeys();
    });

  const revoke = (key: Key) =>
    act(async () => {
      setPending(null);
      await dash('POST', `/keys/${key.id}/revoke`);
      await loadKeys();
    });

  const setLimits = (key: Key, event: Event) =>
    act(async () => {
      event.preventDefault();
      const data = new FormData(event.currentTarget as HTMLFormElement);
      setPending(null);
      await dash('POST', `/keys/${key.id}/limits`, { rpm: numberOrNull(data, 'rpm'), tpm: numberOrNull(data, 'tpm') });
      await loadKeys();
    });

  const copy = (text: string) =>
    navigator.clipboard.writeText(text).then(
      () => setCopied(true),
      () => setCopied(false),
    );

  return (
    <main id="main">
      <h1>{t('keys.title')}</h1>
      <ErrorNote error={error} />
      <Projects projects={projects} project={project} onChange={setProject} act={act} onCreated={loadProjects} />

      {project && <CreateKey metered={metered} onSubmit={(e) => void createKey(e)} />}

      <section aria-labelledby="list-heading">
        <h2 id="list-heading">{t('keys.list')}</h2>
        {keys.length === 0 ? (
          <p data-testid="no-keys">
            {t('keys.none')}{' '}
            {project && (
              <button type="button" onClick={() => document.getElementById(KEY_NAME)?.focus()}>
                {t('keys.goToForm')}
              </button>
            )}
          </p>
        ) : (
          <KeysTable keys={keys} metered={metered} onAction={setPending} />
        )}
      </section>

      {secret && (
        <SecretDialog secret={secret.secret} copied={copied} onCopy={() => void copy(secret.secret)} onClose={() => setSecret(null)} />
      )}

      {pending && (
        <PendingDialog
          pending={pending}
          onCancel={() => setPending(null)}
          onRevoke={(key) => void revoke(key)}
          onRotate={(key, graceSeconds) => void rotate(key, graceSeconds)}
          onSetLimits={(key, event) => void setLimits(key, event)}
        />
      )}
    </main>
  );
}

/** The project chooser, and the form that creates a project (chosen once made). */
function Projects(props: {
  projects: Project[];
  project: string;
  onChange: (id: string) => void;
  act: (work: () => Promise<void>) => Promise<void>;
  onCreated: (id: string) => Promise<void>;
}) {
  const createProject = (event: Event) =>
    props.act(async () => {
      event.preventDefault();
      const form = event.currentTarget as HTMLFormElement;
      const created = await dash<Project>('POST', '/projects', { name: field(new FormData(form), 'name') });
      form.reset();
      await props.onCreated(created.id);
    });
  return (
    <section aria-labelledby="projects-heading" class="row">
      <h2 id="projects-heading" class="visually-hidden">
        {t('keys.projects')}
      </h2>
      <ProjectSelect projects={props.projects} project={props.project} onChange={props.onChange} testId="project-select" />
      <form onSubmit={(e) => void createProject(e)} class="inline">
        <label>
          {t('keys.newProject')}
          <input name="name" required pattern="[A-Za-z0-9][A-Za-z0-9._\-]{0,63}" dir="ltr" />
        </label>
        <button type="submit">{t('keys.createProject')}</button>
      </form>
    </section>
  );
}

/** The form that creates a key in the chosen project (with its own limits, where limits are metered). */
function CreateKey(props: { metered: boolean; onSubmit: (event: Event) => void }) {
  return (
    <section aria-labelledby="create-heading">
      <h2 id="create-heading">{t('keys.create')}</h2>
      <form onSubmit={props.onSubmit} class="inline" data-testid="create-key">
        <label>
          {t('keys.name')}
          <input name="name" id={KEY_NAME} maxLength={100} />
        </label>
        {props.metered && (
          <>
            <label>
              {t('keys.rpm')}
              <input name="rpm" type="number" min={1} step={1} dir="ltr" />
            </label>
            <label>
              {t('keys.tpm')}
              <input name="tpm" type="number" min={1} step={1} dir="ltr" />
            </label>
          </>
        )}
        <button type="submit" class="primary">
          {t('keys.createAction')}
        </button>
      </form>
    </section>
  );
}

/** The project's keys, each active one with its actions (which ask before they act, through `onAction`). */
function KeysTable(props: { keys: Key[]; metered: boolean; onAction: (pending: Pending) => void }) {
  const { metered } = props;
  return (
    <table data-testid="keys-table">
      <thead>
        <tr>
          <th scope="col">{t('keys.id')}</th>
          <th scope="col">{t('keys.name')}</th>
          <th scope="col">{t('keys.status')}</th>
          <th scope="col">{t('keys.created')}</th>
          <th scope="col">{t('keys.lastUsed')}</th>
          {metered && <th scope="col">{t('keys.limits')}</th>}
          <th scope="col">
            <span class="visually-hidden">{t('keys.actions')}</span>
          </th>
        </tr>
      </thead>
      <tbody>
        {props.keys.map((key) => (
          <tr key={key.id} data-key={key.id}>
            <td dir="ltr">
              <code>{key.id}</code>
            </td>
            <td dir="auto">{key.name ?? '—'}</td>
            <td>{key.status === 'active' ? t('keys.active') : t('keys.revoked')}</td>
            <td>{formatDate(key.createdAt)}</td>
            <td>{formatDate(key.lastUsedAt)}</td>
            {metered && (
              <td dir="ltr">
                {key.rpm == null ? t('keys.default') : formatNumber(key.rpm)} /{' '}
                {key.tpm == null ? t('keys.default') : formatNumber(key.tpm)}
              </td>
            )}
            <td>
              {key.status === 'active' && (
                <div class="actions">
                  <button type="button" onClick={() => props.onAction({ kind: 'rotate', key })}>
                    {t('keys.rotate')}
                  </button>
                  {metered && (
                    <button type="button" onClick={() => props.onAction({ kind: 'limits', key })}>
                      {t('keys.editLimits')}
                    </button>
                  )}
                  <button type="button" class="danger" onClick={() => props.onAction({ kind: 'revoke', key })}>
                    {t('keys.revoke')}
                  </button>
                </div>
              )}
            </td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}

/** A new secret, shown once, with a copy button. */
function SecretDialog(props: { secret: string; copied: boolean; onCopy: () => void; onClose: () => void }) {
  return (
    <Modal title={t('keys.secretTitle')} onClose={props.onClose} testId="secret-dialog">
      <p>{t('keys.secretOnce')}</p>
      <p class="secret" dir="ltr">
        <code data-testid="secret">{props.secret}</code>
      </p>
      <div class="actions">
        <button type="button" onClick={props.onCopy}>
          {props.copied ? t('keys.copied') : t('keys.copy')}
        </button>
        <button type="button" class="primary" onClick={props.onClose}>
          {t('keys.stored')}
        </button>
      </div>
    </Modal>
  );
}

/** Asks before an action on a key: revoke it, rotate it (with a grace period), or edit its limits. */
function PendingDialog(props: {
  pending: NonNullable<Pending>;
  onCancel: () => void;
  onRevoke: (key: Key) => void;
  onRotate: (key: Key, graceSeconds: number) => void;
  onSetLimits: (key: Key, event: Event) => void;
}) {
  const { kind, key } = props.pending;
  if (kind === 'revoke')
    return (
      <Confirm
        title={t('keys.revokeTitle')}
        message={t('keys.revokeMessage', { id: key.id })}
        action={t('keys.revoke')}
        onCancel={props.onCancel}
        onConfirm={() => props.onRevoke(key)}
      />
    );
  if (kind === 'rotate')
    return <RotateDialog target={key} onCancel={props.onCancel} onRotate={(graceSeconds) => props.onRotate(key, graceSeconds)} />;
  return <LimitsDialog target={key} onCancel={props.onCancel} onSubmit={(event) => props.onSetLimits(key, event)} />;
}

/** Asks for the grace period before rotating `target`'s secret. */
function RotateDialog(props: { target: Key; onCancel: () => void; onRotate: (graceSeconds: number) => void }) {
  return (
    <Modal title={t('keys.rotateTitle')} onClose={props.onCancel} testId="rotate-dialog">
      <form
        onSubmit={(e) => {
          e.preventDefault();
          props.onRotate(Number(field(new FormData(e.currentTarget), 'grace') || 0));
        }}
      >
        <p>{t('keys.rotateMessage', { id: props.target.id })}</p>
        <label>
          {t('keys.grace')}
          <input name="grace" type="number" min={0} max={604800} step={1} value={0} dir="ltr" />
        </label>
        <div class="actions">
          <button type="button" onClick={props.onCancel}>
            {t('common.cancel')}
          </button>
          <button type="submit" class="danger">
            {t('keys.rotate')}
          </button>
        </div>
      </form>
    </Modal>
  );
}

/** Edits `target`'s own limits (empty: the defaults apply). */
function LimitsDialog(props: { target: Key; onCancel: () => void; onSubmit: (event: Event) => void }) {
  return (
    <Modal title={t('keys.limitsTitle')} onClose={props.onCancel} testId="limits-dialog">
      <form onSubmit={props.onSubmit}>
        <p>{t('keys.limitsHint')}</p>
        <label>
          {t('keys.rpm')}
          <input name="rpm" type="number" min={1} step={1} value={props.target.rpm ?? ''} dir="ltr" />
        </label>
        <label>
          {t('keys.tpm')}
          <input name="tpm" type="number" min={1} step={1} value={props.target.tpm ?? ''} dir="ltr" />
        </label>
        <div class="actions">
          <button type="button" onClick={props.onCancel}>
            {t('common.cancel')}
          </button>
          <button type="submit" class="primary">
            {t('common.save')}
          </button>
        </div>
      </form>
    </Modal>
  );
}
