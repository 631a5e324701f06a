// Projects and their keys: create (the secret shown once, with a copy button), rotate with an optional grace
// period, revoke, and edit the key's own rate limits. Destructive actions ask first.
import { useEffect, useState } from 'preact/hooks';
import { dash, type Key, type Project, type Session } from '../api.js';
import { Confirm, ErrorNote, Modal, ProjectSelect, field, messageOf, useProjects } from '../components.js';
import { formatDate, t } from '../i18n.js';

type Pending = { kind: 'rotate' | 'revoke' | 'limits'; key: Key } | null;

function numberOrNull(form: FormData, name: string): number | null {
  const text = field(form, name).trim();
  return text === '' ? null : Number(text);
}

export function KeysPage(props: { session: Session }) {
  const metered = props.session.posture === 'cloud' || props.session.posture === 'frontier';
  const [keys, setKeys] = useState<Key[]>([]);
  const [error, setError] = useState<string | null>(null);
  const { projects, project, setProject, reload: loadProjects } = useProjects(setError);
  const [secret, setSecret] = useState<{ key: Key; secret: string } | null>(null);
  const [pending, setPending] = useState<Pending>(null);
  const [copied, setCopied] = useState(false);

  async function loadKeys() {
    if (!project) return setKeys([]);
    const { data } = await dash<{ data: Key[] }>('GET', `/keys?project=${encodeURIComponent(project)}`);
    setKeys(data);
  }

  useEffect(() => {
    loadKeys().catch((err) => setError(messageOf(err)));
  }, [project]);

  async function act(work: () => Promise<void>) {
    setError(null);
    try {
      await work();
    } catch (err) {
      setError(messageOf(err));
    }
  }

  const createProject = (event: Event) =>
    act(async () => {
      event.preventDefault();
      const form = event.currentTarget as HTMLFormElement;
      const created = await dash<Project>('POST', '/projects', { name: field(new FormData(form), 'name') });
      form.reset();
      await loadProjects(created.id);
    });

  const createKey = (event: Event) =>
    act(async () => {
      event.preventDefault();
      const form = event.currentTarget as HTMLFormElement;
      const data = new FormData(form);
      const body: Record<string, unknown> = { project };
      if (field(data, 'name').trim()) body.name = field(data, 'name').trim();
      if (metered) {
        body.rpm = numberOrNull(data, 'rpm');
        body.tpm = numberOrNull(data, 'tpm');
      }
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

  async function copy(text: string) {
    await navigator.clipboard.writeText(text).then(
      () => setCopied(true),
      () => setCopied(false),
    );
  }

  return (
    <main id="main">
      <h1>{t('keys.title')}</h1>
      <ErrorNote error={error} />
      <section aria-labelledby="projects-heading" class="row">
        <h2 id="projects-heading" class="visually-hidden">
          {t('keys.projects')}
        </h2>
        <ProjectSelect projects={projects} project={project} onChange={setProject} testId="project-select" />
        <form onSubmit={(e) => void createProject(e)} class="inline">
          <label>
            {t('keys.newProject')}
            <input name="name" required pattern="[A-Za-z0-9][A-Za-z0-9._\-]{0,63}" dir="ltr" />
          </label>
          <button type="submit">{t('keys.createProject')}</button>
        </form>
      </section>

      {project && (
        <section aria-labelledby="create-heading">
          <h2 id="create-heading">{t('keys.create')}</h2>
          <form onSubmit={(e) => void createKey(e)} class="inline" data-testid="create-key">
            <label>
              {t('keys.name')}
              <input name="name" maxLength={100} />
            </label>
            {metered && (
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
      )}

      <section aria-labelledby="list-heading">
        <h2 id="list-heading">{t('keys.list')}</h2>
        {keys.length === 0 ? (
          <p>{t('keys.none')}</p>
        ) : (
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
              {keys.map((key) => (
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
                      {key.rpm ?? t('keys.default')} / {key.tpm ?? t('keys.default')}
                    </td>
                  )}
                  <td>
                    {key.status === 'active' && (
                      <div class="actions">
                        <button type="button" onClick={() => setPending({ kind: 'rotate', key })}>
                          {t('keys.rotate')}
                        </button>
                        {metered && (
                          <button type="button" onClick={() => setPending({ kind: 'limits', key })}>
                            {t('keys.editLimits')}
                          </button>
                        )}
                        <button type="button" class="danger" onClick={() => setPending({ kind: 'revoke', key })}>
                          {t('keys.revoke')}
                        </button>
                      </div>
                    )}
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        )}
      </section>

      {secret && (
        <Modal title={t('keys.secretTitle')} onClose={() => setSecret(null)} testId="secret-dialog">
          <p>{t('keys.secretOnce')}</p>
          <p class="secret" dir="ltr">
            <code data-testid="secret">{secret.secret}</code>
          </p>
          <div class="actions">
            <button type="button" onClick={() => void copy(secret.secret)}>
              {copied ? t('keys.copied') : t('keys.copy')}
            </button>
            <button type="button" class="primary" onClick={() => setSecret(null)}>
              {t('keys.stored')}
            </button>
          </div>
        </Modal>
      )}

      {pending?.kind === 'revoke' && (
        <Confirm
          title={t('keys.revokeTitle')}
          message={t('keys.revokeMessage', { id: pending.key.id })}
          action={t('keys.revoke')}
          onCancel={() => setPending(null)}
          onConfirm={() => void revoke(pending.key)}
        />
      )}
      {pending?.kind === 'rotate' && (
        <Modal title={t('keys.rotateTitle')} onClose={() => setPending(null)} testId="rotate-dialog">
          <form
            onSubmit={(e) => {
              e.preventDefault();
              void rotate(pending.key, Number(field(new FormData(e.currentTarget), 'grace') || 0));
            }}
          >
            <p>{t('keys.rotateMessage', { id: pending.key.id })}</p>
            <label>
              {t('keys.grace')}
              <input name="grace" type="number" min={0} max={604800} step={1} value={0} dir="ltr" />
            </label>
            <div class="actions">
              <button type="button" onClick={() => setPending(null)}>
                {t('common.cancel')}
              </button>
              <button type="submit" class="danger">
                {t('keys.rotate')}
              </button>
            </div>
          </form>
        </Modal>
      )}
      {pending?.kind === 'limits' && (
        <Modal title={t('keys.limitsTitle')} onClose={() => setPending(null)} testId="limits-dialog">
          <form onSubmit={(e) => void setLimits(pending.key, e)}>
            <p>{t('keys.limitsHint')}</p>
            <label>
              {t('keys.rpm')}
              <input name="rpm" type="number" min={1} step={1} value={pending.key.rpm ?? ''} dir="ltr" />
            </label>
            <label>
              {t('keys.tpm')}
              <input name="tpm" type="number" min={1} step={1} value={pending.key.tpm ?? ''} dir="ltr" />
            </label>
            <div class="actions">
              <button type="button" onClick={() => setPending(null)}>
                {t('common.cancel')}
              </button>
              <button type="submit" class="primary">
                {t('common.save')}
              </button>
            </div>
          </form>
        </Modal>
      )}
    </main>
  );
}
