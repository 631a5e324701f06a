export {
  Accounts,
  AccountsError,
  projectCap,
  SESSION_HOURS,
  sameToken,
  view,
  type Role,
  type SessionRecord,
  type UserRecord,
  type UserView,
} from './accounts.js';
export { MIN_PASSWORD_LENGTH, passwordProblem } from './passwords.js';
