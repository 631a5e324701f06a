// Small shared pieces: a modal dialog on the native <dialog> element (focus trapped, Escape closes), and an error
// line that screen readers announce.
import type { ComponentChildren } from 'preact';
import { useEffect, useRef } from 'preact/hooks';
import { ApiFailure } from './api.js';
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
