// What this deployment serves and why other models are not listed, readiness, the audit signer and, on sealed
// postures, the egress counter.
import { useEffect, useState } from 'preact/hooks';
import type { HealthView } from '../../../wire.js';
import { dash } from '../api.js';
import { ErrorNote, messageOf } from '../components.js';
import { t, type MessageKey } from '../i18n.js';

type Health = HealthView;

export function ModelsPage() {
  const [health, setHealth] = useState<Health | null>(null);
  const [listed, setListed] = useState<string[]>([]);
  const [error, setError] = useState<string | null>(null);

  useEffect(() => {
    dash<{ health: Health; listed: string[] }>('GET', '/overview')
      .then((o) => {
        setHealth(o.health);
        setListed(o.listed);
      })
      .catch((err) => setError(messageOf(err)));
  }, []);

  return (
    <main id="main">
      <h1>{t('models.title')}</h1>
      <ErrorNote error={error} />
      {health && (
        <>
          <p data-testid="health-status">
            {t('models.status', { status: health.status === 'ok' ? t('models.ok') : t('models.degraded'), region: health.region })}
          </p>
          {health.egress && (
            <p data-testid="egress">
              {t('models.egress', { firstBoot: health.egress.refused_since_first_boot, boot: health.egress.refused_since_boot })}
            </p>
          )}
          {health.audit && (
            <p>
              {t('models.audit', { count: health.audit.entries })}{' '}
              <strong class={health.audit.signer === 'tpm' ? 'signer tpm' : 'signer software'}>
                {health.audit.signer === 'tpm' ? t('audit.signerTpm') : t('audit.signerSoftware')}
              </strong>
            </p>
          )}
          <h2>{t('models.served')}</h2>
          <ServedModels models={health.models} listed={listed} />
          <h2>{t('models.unavailable')}</h2>
          <UnavailableModels models={health.unavailable_models} />
        </>
      )}
    </main>
  );
}

/** The models this deployment serves: readiness, whether /v1/models lists them, and where they run. */
function ServedModels(props: { models: Health['models']; listed: string[] }) {
  return (
    <table data-testid="models-table">
      <thead>
        <tr>
          <th scope="col">{t('models.id')}</th>
          <th scope="col">{t('models.capability')}</th>
          <th scope="col">{t('models.readiness')}</th>
          <th scope="col">{t('models.listed')}</th>
          <th scope="col">{t('models.where')}</th>
          <th scope="col">{t('models.queue')}</th>
          <th scope="col">{t('models.detail')}</th>
        </tr>
      </thead>
      <tbody>
        {props.models.map((m) => (
          <tr key={m.id}>
            <td dir="ltr">{m.id}</td>
            <td>{t(`capability.${m.capability}` as MessageKey)}</td>
            <td>{t(`readiness.${m.readiness}` as MessageKey)}</td>
            <td>{props.listed.includes(m.id) ? t('common.yes') : t('common.no')}</td>
            <td data-testid={`where-${m.id}`}>
              {m.frontier ? (
                <strong class="non-sovereign">{t('models.frontier', { name: m.upstream ?? '' })}</strong>
              ) : m.upstream ? (
                t('models.upstream', { name: m.upstream })
              ) : (
                t('models.local')
              )}
            </td>
            <td data-testid={`queue-${m.id}`}>{queueOf(m)}</td>
            <td dir="ltr">{m.detail ?? ''}</td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}

/** Calls running and waiting, the waiting ones by service tier; nothing where the engine does not queue. */
function queueOf(m: Health['models'][number]): string {
  if (m.busy === undefined || m.waiting === undefined) return '';
  const tiers = m.waiting_by_tier;
  const byTier = tiers ? t('models.queueTiers', { priority: tiers.priority, default: tiers.default, flex: tiers.flex }) : '';
  return `${t('models.queueCounts', { count: m.busy, waiting: m.waiting })}${byTier ? ` ${byTier}` : ''}`;
}

/** The manifest's models this deployment does not serve, and why. */
function UnavailableModels(props: { models: Health['unavailable_models'] }) {
  return props.models.length === 0 ? (
    <p>{t('models.noneUnavailable')}</p>
  ) : (
    <table>
      <thead>
        <tr>
          <th scope="col">{t('models.id')}</th>
          <th scope="col">{t('models.state')}</th>
          <th scope="col">{t('models.reason')}</th>
        </tr>
      </thead>
      <tbody>
        {props.models.map((m) => (
          <tr key={m.id}>
            <td dir="ltr">{m.id}</td>
            <td>{t(`state.${m.state}` as MessageKey)}</td>
            <td dir="ltr">{m.reason}</td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}
