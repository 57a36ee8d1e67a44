/**
 * The panel's tab strip (Jobs, GPUs, Submit, Datasets): ARIA tabs, arrow keys move between
 * them. A tab is mounted the first time it is shown and then kept (hidden), so the GPUs
 * tab's history and a half-filled form survive a look at another tab.
 */
import * as React from 'react';

/** One tab: its id (used by commands), its label and what it shows. */
export interface PanelTab {
  id: string;
  label: string;
  render: () => React.ReactNode;
}

/** The strip and the tab panels; `active` is controlled by the owner (commands set it). */
export function PanelTabs({
  tabs,
  active,
  onSelect
}: {
  tabs: PanelTab[];
  active: string;
  onSelect: (id: string) => void;
}): JSX.Element {
  const mounted = React.useRef(new Set<string>());
  mounted.current.add(active);
  const buttons = React.useRef<Record<string, HTMLButtonElement | null>>({});
  const key = (event: React.KeyboardEvent, index: number): void => {
    const step = event.key === 'ArrowRight' ? 1 : event.key === 'ArrowLeft' ? -1 : 0;
    if (!step) return;
    event.preventDefault();
    const next = tabs[(index + step + tabs.length) % tabs.length];
    onSelect(next.id);
    buttons.current[next.id]?.focus();
  };
  return (
    <div className="jp-WorkbenchPanel-tabs">
      <div className="jp-WorkbenchPanel-tabbar" role="tablist" aria-label="Workbench">
        {tabs.map((tab, i) => (
          <button
            key={tab.id}
            ref={el => {
              buttons.current[tab.id] = el;
            }}
            role="tab"
            id={`jp-workbench-tab-${tab.id}`}
            aria-selected={tab.id === active}
            aria-controls={`jp-workbench-tabpanel-${tab.id}`}
            tabIndex={tab.id === active ? 0 : -1}
            className={`jp-WorkbenchPanel-tab${tab.id === active ? ' jp-mod-active' : ''}`}
            data-tab={tab.id}
            onClick={() => onSelect(tab.id)}
            onKeyDown={e => key(e, i)}
          >
            {tab.label}
          </button>
        ))}
      </div>
      {tabs
        .filter(tab => mounted.current.has(tab.id))
        .map(tab => (
          <div
            key={tab.id}
            role="tabpanel"
            id={`jp-workbench-tabpanel-${tab.id}`}
            aria-labelledby={`jp-workbench-tab-${tab.id}`}
            className="jp-WorkbenchPanel-tabpanel"
            hidden={tab.id !== active}
            data-tabpanel={tab.id}
          >
            {tab.render()}
          </div>
        ))}
    </div>
  );
}
