// Sign-in, and on cloud and frontier the self-serve sign-up that creates an account and its first project.
import { useState } from 'preact/hooks';
import { dash, type Session, type User } from '../api.js';
import { ErrorNote, field, messageOf } from '../components.js';
import { t } from '../i18n.js';

export function SignIn(props: {
  session: Session;
  mode: 'signin' | 'signup';
  onSignedIn: (user: User) => void;
  go: (path: string) => void;
}) {
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  const signup = props.mode === 'signup' && props.session.signup;

  async function submit(event: Event) {
    event.preventDefault();
    const form = new FormData(event.currentTarget as HTMLFormElement);
    const body: Record<string, string> = { email: field(form, 'email'), password: field(form, 'password') };
    if (signup) body.project = field(form, 'project');
    setBusy(true);
    setError(null);
    try {
      const { user } = await dash<{ user: User }>('POST', signup ? '/signup' : '/login', body);
      props.onSignedIn(user);
    } catch (err) {
      setError(messageOf(err));
    } finally {
      setBusy(false);
    }
  }

  return (
    <main class="narrow" id="main">
      <h1>{signup ? t('signin.signupTitle') : t('signin.title')}</h1>
      <form onSubmit={(e) => void submit(e)} data-testid={signup ? 'signup-form' : 'signin-form'}>
        <label>
          {t('signin.email')}
          <input name="email" type="email" autocomplete="username" required dir="ltr" />
        </label>
        <label>
          {t('signin.password')}
          <input
            name="password"
            type="password"
            autocomplete={signup ? 'new-password' : 'current-password'}
            required
            minLength={signup ? 12 : 1}
            dir="ltr"
          />
        </label>
        {signup && (
          <label>
            {t('signin.project')}
            <input name="project" required pattern="[A-Za-z0-9][A-Za-z0-9._\-]{0,63}" dir="ltr" />
            <small>{t('signin.projectHint')}</small>
          </label>
        )}
        <ErrorNote error={error} />
        <button type="submit" class="primary" disabled={busy}>
          {signup ? t('signin.signupAction') : t('signin.action')}
        </button>
      </form>
      {props.session.signup && (
        <p>
          {signup ? (
            <a href="/dashboard/signin" onClick={(e) => (e.preventDefault(), props.go('signin'))}>
              {t('signin.haveAccount')}
            </a>
          ) : (
            <a href="/dashboard/signup" onClick={(e) => (e.preventDefault(), props.go('signup'))}>
              {t('signin.noAccount')}
            </a>
          )}
        </p>
      )}
      {!props.session.signup && <p class="hint">{t('signin.operatorHint')}</p>}
    </main>
  );
}
