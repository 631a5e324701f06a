// The dashboard and chat app: one page under /dashboard/, its own routes in the path.
import '@fontsource/noto-sans-arabic/400.css';
import '@fontsource/noto-sans-arabic/700.css';
import './styles.css';
import { render } from 'preact';
import { useEffect, useState } from 'preact/hooks';
import { dash, useCsrf, type Session, type User } from './api.js';
import { applyLang, currentLang, t, type MessageKey } from './i18n.js';
import { AuditPage } from './pages/Audit.js';
import { ChatPage } from './pages/Chat.js';
import { KeysPage } from './pages/Keys.js';
import { ModelsPage } from './pages/Models.js';
import { OverviewPage } from './pages/Overview.js';
import { SignIn } from './pages/SignIn.js';
import { UsagePage } from './pages/Usage.js';

const PAGES = ['overview', 'keys', 'usage', 'audit', 'chat', 'models'] as const;
type Page = (typeof PAGES)[number] | 'signin' | 'signup';

function pageFromPath(): Page {
  const name = location.pathname.replace(/^\/dashboard\/?/, '').split('/')[0] ?? '';
  return (PAGES as readonly string[]).includes(name) || name === 'signin' || name === 'signup' ? (name as Page) : 'overview';
}

function App() {
  const [session, setSession] = useState<Session | null>(null);
  const [page, setPage] = useState<Page>(pageFromPath());
  const [, setLang] = useState(currentLang());
  const [error, setError] = useState<string | null>(null);

  async function loadSession() {
    const s = await dash<Session>('GET', '/session');
    useCsrf(s.csrf);
    setSession(s);
  }

  useEffect(() => {
    applyLang(currentLang());
    loadSession().catch((err: Error) => setError(err.message));
    const onPop = () => setPage(pageFromPath());
    addEventListener('popstate', onPop);
    return () => removeEventListener('popstate', onPop);
  }, []);

  function go(next: Page) {
    history.pushState(null, '', `/dashboard/${next}`);
    setPage(next);
  }

  function switchLang() {
    const next = currentLang() === 'ar' ? 'en' : 'ar';
    applyLang(next);
    setLang(next);
  }

  async function signOut() {
    await dash('POST', '/logout');
    await loadSession();
    go('signin');
  }

  async function signedIn(_user: User) {
    await loadSession();
    go('overview');
  }

  return (
    <>
      <a class="skip" href="#main">
        {t('common.skip')}
      </a>
      {session && !session.sovereign && (
        <div class="frontier-banner" role="note" data-testid="frontier-banner">
          {t('frontier.banner')}
        </div>
      )}
      <Header session={session} page={page} go={go} onSwitchLang={switchLang} onSignOut={() => void signOut()} />
      {error && (
        <p class="error" role="alert">
          {error}
        </p>
      )}
      {session &&
        (!session.user ? (
          <SignIn
            session={session}
            mode={page === 'signup' ? 'signup' : 'signin'}
            onSignedIn={(u) => void signedIn(u)}
            go={(p) => go(p as Page)}
          />
        ) : (
          <SignedInPage session={session} page={page} go={go} />
        ))}
    </>
  );
}

/** The brand, the region and posture, the pages (once signed in), the language switch and signing out. */
function Header(props: { session: Session | null; page: Page; go: (page: Page) => void; onSwitchLang: () => void; onSignOut: () => void }) {
  const { session, page, go } = props;
  return (
    <header>
      <span class="brand">{t('app.title')}</span>
      {session && <span class="region">{t('app.region', { region: session.region, posture: session.posture })}</span>}
      {session?.user && (
        <nav aria-label={t('nav.label')}>
          {PAGES.map((p) => (
            <a
              key={p}
              href={`/dashboard/${p}`}
              aria-current={page === p ? 'page' : undefined}
              onClick={(e) => {
                e.preventDefault();
                go(p);
              }}
            >
              {t(`nav.${p}` as MessageKey)}
            </a>
          ))}
        </nav>
      )}
      <span class="spacer" />
      <button type="button" onClick={props.onSwitchLang} lang={currentLang() === 'ar' ? 'en' : 'ar'} data-testid="lang-switch">
        {t('lang.other')}
      </button>
      {session?.user && (
        <button type="button" onClick={props.onSignOut}>
          {t('nav.signout')}
        </button>
      )}
    </header>
  );
}

/** The page chosen, for a signed-in user ('signin' and 'signup' show the overview). */
function SignedInPage(props: { session: Session; page: Page; go: (page: Page) => void }) {
  switch (props.page) {
    case 'keys':
      return <KeysPage session={props.session} />;
    case 'chat':
      return <ChatPage session={props.session} />;
    case 'models':
      return <ModelsPage />;
    case 'usage':
      return <UsagePage />;
    case 'audit':
      return <AuditPage />;
    default:
      return <OverviewPage session={props.session} go={props.go} />;
  }
}

render(<App />, document.getElementById('app')!);
