// Small shared pieces: a modal dialog on the native <dialog> element (focus trapped, Escape closes), and an error
// line that screen readers announce.
import type { ComponentChildren } from 'preact';
import { useEffect, useRef, useState } from 'preact/hooks';
import { ApiFailure, dash, type Project } from './api.js';
import { t, type MessageKey } from './i18n.js';
import en from './messages/en.json';

export function Modal(props: { title: string; onClose: () => void; children: ComponentChildren; testId?: string }) {
  const ref = useRef<HTMLDialogElement>(null);
  useEffect(() => {
    const dialog = ref.current;
    if (dialog && !dialog.open) dialog.showModal();
    return () => dialog?.close();
  }, []);
  return (
    <dialog ref={ref} aria-labelledby="modal-title" onClose={props.onClose} data-testid={props.testId}>
      <h2 id="modal-title">{props.title}</h2>
      {props.children}
    </dialog>
  );
}

/** Asks before a destructive action. */
export function Confirm(props: {
  title: string;
  message: string;
  action: string;
  onConfirm: () => void;
  onCancel: () => void;
  children?: ComponentChildren;
}) {
  return (
    <Modal title={props.title} onClose={props.onCancel} testId="confirm">
      <p>{props.message}</p>
      {props.children}
      <div class="actions">
        <button type="button" onClick={props.onCancel}>
          {t('common.cancel')}
        </button>
        <button type="button" class="danger" onClick={props.onConfirm}>
          {props.action}
        </button>
      </div>
    </Modal>
  );
}

export function ErrorNote(props: { error: string | null }) {
  return (
    <p class="error" role="alert" hidden={!props.error}>
      {props.error}
    </p>
  );
}

/** A text field of a submitted form ('' when absent). */
export function field(form: FormData, name: string): string {
  const value = form.get(name);
  return typeof value === 'string' ? value : '';
}

/** What to tell the user about a failure: in their language when the error's code is known, else the server's words. */
export function messageOf(err: unknown): string {
  if (err instanceof ApiFailure && err.code && `errors.${err.code}` in en) return t(`errors.${err.code}` as MessageKey);
  return err instanceof Error ? err.message : String(err);
}

/** The account's projects and the one chosen (the first, until the user picks another). */
export function useProjects(onError: (message: string) => void) {
  const [projects, setProjects] = useState<Project[]>([]);
  const [project, setProject] = useState('');
  async function reload(select?: string) {
    const { data } = await dash<{ data: Project[] }>('GET', '/projects');
    setProjects(data);
    setProject((current) => select ?? (current || data[0]?.id || ''));
  }
  useEffect(() => {
    reload().catch((err) => onError(messageOf(err)));
  }, []);
  return { projects, project, setProject, reload };
}

export function ProjectSelect(props: { projects: Project[]; project: string; onChange: (id: string) => void; testId?: string }) {
  return (
    <label>
      {t('keys.project')}
      <select value={props.project} onChange={(e) => props.onChange(e.currentTarget.value)} data-testid={props.testId}>
        {props.projects.map((p) => (
          <option value={p.id} key={p.id}>
            {p.name}
          </option>
        ))}
      </select>
    </label>
  );
}
