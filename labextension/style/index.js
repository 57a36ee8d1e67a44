import './base.css';
import './tabs.css';
import './gpus.css';
import './submit.css';
