// What an account is shown as. Plain types that import nothing: the dashboard's web code reads them too
// (daemon/dashboard/wire.ts), and its compiler checks every file it reaches.

export type Role = 'admin' | 'member';

export interface UserView {
  id: string;
  email: string;
  role: Role;
  projects: string[];
  createdAt: string;
}
