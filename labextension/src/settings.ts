/**
 * The panel's settings (schema/plugin.json, edited in JupyterLab's Settings Editor): read
 * from ISettingRegistry's composite into one typed object the tabs share through a React
 * context, so a change in the editor reaches an open panel without a reload.
 */
import * as React from 'react';

/** What the Settings Editor controls (see schema/plugin.json for each one's meaning). */
export interface PanelSettings {
  /** The backend the Submit form starts with ('' = the server's default). */
  defaultBackend: string;
  /** Whether a running job's log view follows the log as it grows. */
  followLogs: boolean;
  /** Jobs in the first page of the list (the rest follow in the server's largest pages). */
  pageSize: number;
  /** Milliseconds the Submit form waits after the last keystroke before checking. */
  validateDelayMs: number;
}

/** The schema's defaults. */
export const DEFAULT_SETTINGS: PanelSettings = {
  defaultBackend: '',
  followLogs: true,
  pageSize: 100,
  validateDelayMs: 400
};

function int(value: unknown, low: number, high: number, fallback: number): number {
  return typeof value === 'number' && Number.isInteger(value) && value >= low && value <= high
    ? value
    : fallback;
}

/** The settings from the registry's composite (user values over the schema's defaults);
 * a value of the wrong type (a hand-edited file) falls back to the default. */
export function readSettings(composite: { [key: string]: unknown }): PanelSettings {
  const backend = composite['defaultBackend'];
  const follow = composite['followLogs'];
  return {
    defaultBackend: typeof backend === 'string' ? backend.trim() : DEFAULT_SETTINGS.defaultBackend,
    followLogs: typeof follow === 'boolean' ? follow : DEFAULT_SETTINGS.followLogs,
    pageSize: int(composite['pageSize'], 1, 1000, DEFAULT_SETTINGS.pageSize),
    validateDelayMs: int(composite['validateDelayMs'], 0, 10000, DEFAULT_SETTINGS.validateDelayMs)
  };
}

/** The current settings, for any tab that reads them. */
export const SettingsContext = React.createContext<PanelSettings>(DEFAULT_SETTINGS);
